/* beamctl.c — the command line: asks a beamd for its tables and prints them
 * for a person (or as JSON with --json). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "beam/codec.h"
#include "client.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: beamctl [--socket PATH] COMMAND [--json]\n"
            "commands:\n"
            "  status     the node, its resources, actors and objects\n"
            "options:\n"
            "  --socket PATH   the daemon's socket (default $BEAM_SOCKET, else per-user)\n"
            "  --json          print the daemon's answer as JSON\n"
            "  --help\n");
}

/* --- JSON --- */

static void json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json(FILE *f, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: fputs("null", f); break;
    case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", f); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(f, "%llu", (unsigned long long)o->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%lld", (long long)o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: fprintf(f, "%.17g", o->via.f64); break;
    case MSGPACK_OBJECT_STR: json_str(f, o->via.str.ptr, o->via.str.size); break;
    case MSGPACK_OBJECT_BIN: {
        fputc('"', f);
        for (uint32_t i = 0; i < o->via.bin.size; i++)
            fprintf(f, "%02x", (unsigned char)o->via.bin.ptr[i]);
        fputc('"', f);
        break;
    }
    case MSGPACK_OBJECT_ARRAY:
        fputc('[', f);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i)
                fputc(',', f);
            json(f, &o->via.array.ptr[i]);
        }
        fputc(']', f);
        break;
    case MSGPACK_OBJECT_MAP:
        fputc('{', f);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            if (i)
                fputc(',', f);
            json(f, &o->via.map.ptr[i].key);
            fputc(':', f);
            json(f, &o->via.map.ptr[i].val);
        }
        fputc('}', f);
        break;
    default: fputs("null", f); break;
    }
}

/* --- the human view --- */

static const char *str(const msgpack_object *map, const char *key, char *buf, size_t n)
{
    const char *s;
    uint32_t len;
    if (beam_field_str(map, key, &s, &len) != 0)
        return "";
    snprintf(buf, n, "%.*s", (int)len, s);
    return buf;
}

static double num(const msgpack_object *map, const char *key)
{
    double v = 0;
    beam_field_float(map, key, &v);
    return v;
}

static void bar(char *out, double used, double total)
{
    const int width = 20;
    int filled = total > 0 ? (int)(used / total * width + 0.5) : 0;
    for (int i = 0; i < width; i++)
        out[i] = i < filled ? '#' : '.';
    out[width] = '\0';
}

static void print_resources(const msgpack_object *st)
{
    const msgpack_object *total = beam_map_get(st, "resources_total");
    const msgpack_object *avail = beam_map_get(st, "resources_available");
    if (!total || total->type != MSGPACK_OBJECT_MAP)
        return;
    printf("Resources (used/total)\n");
    for (uint32_t i = 0; i < total->via.map.size; i++) {
        const msgpack_object *k = &total->via.map.ptr[i].key;
        char name[160], b[32];
        snprintf(name, sizeof name, "%.*s", (int)k->via.str.size, k->via.str.ptr);
        double t = num(total, name), a = num(avail, name), used = t - a;
        bar(b, used, t);
        if (strcmp(name, "memory") == 0 || strcmp(name, "object_store_memory") == 0)
            printf("  %-28s [%s] %.2f/%.2f GiB\n", name, b, used / (1 << 30), t / (1 << 30));
        else
            printf("  %-28s [%s] %g/%g\n", name, b, used, t);
    }
}

static void print_actors(const msgpack_object *st)
{
    const msgpack_object *actors = beam_map_get(st, "actors");
    if (!actors || actors->type != MSGPACK_OBJECT_ARRAY)
        return;
    printf("Actors (%u)\n", actors->via.array.size);
    if (actors->via.array.size)
        printf("  %-32s %-20s %-16s %-8s %-8s %s\n", "ACTOR ID", "CLASS", "STATE", "PID", "GPUS", "NODE");
    for (uint32_t i = 0; i < actors->via.array.size; i++) {
        const msgpack_object *a = &actors->via.array.ptr[i];
        char id[64], cls[64], state[32], node[64], gpus[128] = "";
        const msgpack_object_array *g;
        if (beam_field_array(a, "gpu_ids", &g) == 0)
            for (uint32_t j = 0; j < g->size; j++) {
                size_t len = strlen(gpus);
                snprintf(gpus + len, sizeof gpus - len, "%s%.*s", j ? "," : "", (int)g->ptr[j].via.str.size,
                         g->ptr[j].via.str.ptr);
            }
        printf("  %-32s %-20s %-16s %-8.0f %-8s %.12s\n", str(a, "actor_id", id, sizeof id),
               str(a, "class_name", cls, sizeof cls), str(a, "state", state, sizeof state), num(a, "pid"),
               *gpus ? gpus : "-", str(a, "node_id", node, sizeof node));
    }
}

static void print_status(const msgpack_object *st)
{
    char id[64], ip[64], host[256], sock[128];
    printf("Nodes (1)\n");
    printf("  %-56s %-15s %-6s %s\n", "NODE ID", "IP", "ALIVE", "HOST");
    printf("  %-56s %-15s %-6s %s\n", str(st, "node_id", id, sizeof id), str(st, "node_ip", ip, sizeof ip), "yes",
           str(st, "hostname", host, sizeof host));
    printf("  socket %s, beamd pid %.0f, up %.1f s\n", str(st, "socket", sock, sizeof sock), num(st, "pid"),
           num(st, "uptime_ms") / 1000);
    print_resources(st);
    print_actors(st);
    const msgpack_object *objs = beam_map_get(st, "objects");
    printf("Objects: %.0f (%.0f bytes)\n", num(objs, "count"), num(objs, "bytes"));
    const msgpack_object *cl = beam_map_get(st, "clients");
    printf("Clients: %.0f drivers, %.0f workers\n", num(cl, "drivers"), num(cl, "workers"));
}

/* --- talking to the daemon --- */

static int request(int fd, beam_decoder_t *dec, uint64_t msgid, const char *op, beam_msg_t *reply, char *err,
                   size_t errlen)
{
    beam_enc_t enc;
    beam_enc_init(&enc);
    beam_enc_request(&enc, msgid, op, op[0] == 'h' ? 2 : 0);
    if (op[0] == 'h') {
        beam_pack_key(&enc.pk, "role");
        beam_pack_str(&enc.pk, "ctl");
        beam_pack_key(&enc.pk, "pid");
        msgpack_pack_int64(&enc.pk, (int64_t)getpid());
    }
    size_t len;
    beam_enc_end(&enc, 0);
    char *buf = beam_enc_take(&enc, &len);
    beam_enc_destroy(&enc);
    int rc = beam_client_write_all(fd, buf, len);
    free(buf);
    if (rc < 0) {
        snprintf(err, errlen, "write: %s", strerror(-rc));
        return -1;
    }
    for (;;) {
        const char *frame;
        rc = beam_client_read_frame(fd, dec, &frame, &len);
        if (rc <= 0) {
            snprintf(err, errlen, "%s", rc == 0 ? "the daemon closed the connection" : strerror(-rc));
            return -1;
        }
        if (beam_msg_parse(frame, len, &dec->lim, reply, err, errlen) < 0)
            return -1;
        if (reply->type == BEAM_MSG_REPLY && reply->msgid == msgid)
            break;
        beam_msg_destroy(reply);
    }
    if (reply->error.type == MSGPACK_OBJECT_MAP) {
        char m[256];
        snprintf(err, errlen, "%s", str(&reply->error, "message", m, sizeof m));
        beam_msg_destroy(reply);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    enum { O_SOCKET = 1, O_JSON, O_HELP };
    static const struct option longopts[] = {
        {"socket", 1, 0, O_SOCKET}, {"json", 0, 0, O_JSON}, {"help", 0, 0, O_HELP}, {0, 0, 0, 0}};
    char path[108] = "";
    int as_json = 0, c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_SOCKET: snprintf(path, sizeof path, "%s", optarg); break;
        case O_JSON: as_json = 1; break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    if (strcmp(cmd, "status") != 0) {
        fprintf(stderr, "beamctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    if (!*path)
        beam_client_socket_path(path, sizeof path);
    int fd = beam_client_connect(path);
    if (fd < 0) {
        fprintf(stderr, "beamctl: no beamd answers at %s: %s\n", path, strerror(-fd));
        return 1;
    }
    beam_limits_t lim;
    beam_limits_default(&lim);
    beam_decoder_t dec;
    beam_decoder_init(&dec, &lim);
    beam_msg_t reply;
    char err[256];
    int rc = 1;
    if (request(fd, &dec, 1, "hello", &reply, err, sizeof err) == 0) {
        beam_msg_destroy(&reply);
        if (request(fd, &dec, 2, "status", &reply, err, sizeof err) == 0) {
            if (as_json) {
                json(stdout, &reply.params);
                fputc('\n', stdout);
            } else {
                print_status(&reply.params);
            }
            beam_msg_destroy(&reply);
            rc = 0;
        }
    }
    if (rc)
        fprintf(stderr, "beamctl: %s\n", err);
    beam_decoder_destroy(&dec);
    close(fd);
    return rc;
}
