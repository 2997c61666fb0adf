/* beamctl.c — the command line: asks a beamd for its tables (nodes,
 * resources, actors, placement groups, objects) and prints them for a person,
 * or as JSON with --json. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "beam/codec.h"
#include "client.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: beamctl [--socket PATH] [--timeout SECONDS] status [--json]\n"
            "\n"
            "commands:\n"
            "  status            the daemon's view: nodes (id, ip, alive), resources used/total\n"
            "                    per node, actors (id, class, state, pid, GPUs, calls running, direct\n"
            "                    ones included, and queued, node), placement\n"
            "                    groups (id, strategy, state, bundles and where they are), objects\n"
            "options:\n"
            "  --socket PATH     the daemon's socket (default $BEAM_SOCKET, else\n"
            "                    $XDG_RUNTIME_DIR/beam/beamd.sock, else /tmp/beam-$UID/beamd.sock)\n"
            "  --json            print the daemon's answer as one JSON object\n"
            "  --timeout SECONDS give up when the daemon has not answered by then (default 10)\n"
            "  -h, --help        this text\n"
            "\n"
            "Exit status: 0 on success, 1 when no daemon answers or it refuses, 2 on a usage error.\n"
            "Diagnostics go to stderr.\n");
}

/* --- JSON --- */

/* An element as text: a str as is, a number with %g, else "?". */
static void text(const msgpack_object *o, char *buf, size_t n)
{
    switch (o->type) {
    case MSGPACK_OBJECT_STR: snprintf(buf, n, "%.*s", (int)o->via.str.size, o->via.str.ptr); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: snprintf(buf, n, "%llu", (unsigned long long)o->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: snprintf(buf, n, "%lld", (long long)o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: snprintf(buf, n, "%g", o->via.f64); break;
    default: snprintf(buf, n, "?"); break;
    }
}

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
    case MSGPACK_OBJECT_FLOAT64:
        if (isfinite(o->via.f64))
            fprintf(f, "%.17g", o->via.f64);
        else
            fputs("null", f); /* JSON has no NaN or infinity */
        break;
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
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type == MSGPACK_OBJECT_STR) {
                json(f, k);
            } else { /* JSON keys are strings */
                char kb[64];
                text(k, kb, sizeof kb);
                json_str(f, kb, strlen(kb));
            }
            fputc(':', f);
            json(f, &o->via.map.ptr[i].val);
        }
        fputc('}', f);
        break;
    default: fputs("null", f); break;
    }
}

/* --- the human view --- */

/* Copies a str field into buf ("" when missing or not a str). */
static const char *str(const msgpack_object *map, const char *key, char *buf, size_t n)
{
    const char *s;
    uint32_t len;
    if (beam_field_str(map, key, &s, &len) != 0)
        s = "", len = 0;
    snprintf(buf, n, "%.*s", (int)len, s);
    return buf;
}

static double num(const msgpack_object *map, const char *key)
{
    double v = 0;
    beam_field_float(map, key, &v);
    return v;
}

/* A flag sent as a bool or as an int; dflt when missing. */
static int flag(const msgpack_object *map, const char *key, int dflt)
{
    int b;
    double v;
    if (beam_field_bool(map, key, &b) == 0)
        return b;
    if (beam_field_float(map, key, &v) == 0)
        return v != 0;
    return dflt;
}

static const msgpack_object_array *array(const msgpack_object *map, const char *key)
{
    const msgpack_object_array *a;
    return beam_field_array(map, key, &a) == 0 ? a : NULL;
}

static void bar(char *out, double used, double total)
{
    const int width = 20;
    int filled = total > 0 ? (int)(used / total * width + 0.5) : 0;
    if (filled > width)
        filled = width;
    for (int i = 0; i < width; i++)
        out[i] = i < filled ? '#' : '.';
    out[width] = '\0';
}

/* The node entries: the status's `nodes` array when the daemon sends one (a
 * cluster's head), else the status itself as the one node. */
typedef struct nodes_s {
    const msgpack_object *node[256];
    uint32_t n;     /* shown */
    uint32_t total; /* in the status */
} nodes_t;

static void nodes_of(const msgpack_object *st, nodes_t *out)
{
    const msgpack_object_array *a = array(st, "nodes");
    out->n = 0;
    if (a && a->size > 0) {
        for (uint32_t i = 0; i < a->size && out->n < 256; i++)
            if (a->ptr[i].type == MSGPACK_OBJECT_MAP)
                out->node[out->n++] = &a->ptr[i];
    }
    if (out->n == 0)
        out->node[out->n++] = st;
    out->total = a && a->size > out->n ? a->size : out->n;
}

/* The ip of the node with this id, for naming where a bundle is. */
static const char *node_ip_of(const nodes_t *nodes, const char *id, char *buf, size_t n)
{
    char nid[128];
    for (uint32_t i = 0; i < nodes->n; i++)
        if (*id && strcmp(str(nodes->node[i], "node_id", nid, sizeof nid), id) == 0)
            return str(nodes->node[i], "node_ip", buf, n);
    snprintf(buf, n, "?");
    return buf;
}

static void print_nodes(const msgpack_object *st, const nodes_t *nodes)
{
    char id[128], ip[64], host[256], death[256];
    printf("Nodes (%u)\n", nodes->total);
    printf("  %-56s %-15s %-5s %-4s %s\n", "NODE ID", "IP", "ALIVE", "HEAD", "HOST");
    for (uint32_t i = 0; i < nodes->n; i++) {
        const msgpack_object *n = nodes->node[i];
        int alive = flag(n, "alive", 1);
        printf("  %-56s %-15s %-5s %-4s %s\n", str(n, "node_id", id, sizeof id), str(n, "node_ip", ip, sizeof ip),
               alive ? "yes" : "no", flag(n, "is_head", 0) ? "yes" : "no", str(n, "hostname", host, sizeof host));
        if (!alive && *str(n, "death", death, sizeof death))
            printf("    died: %s\n", death);
    }
    if (nodes->total > nodes->n)
        printf("  ... and %u more nodes (see --json)\n", nodes->total - nodes->n);
    char sock[128], version[64];
    printf("  socket %s, beamd pid %.0f, up %.1f s", str(st, "socket", sock, sizeof sock), num(st, "pid"),
           num(st, "uptime_ms") / 1000);
    if (*str(st, "version", version, sizeof version))
        printf(", version %s", version);
    printf("\n");
}

static void print_node_resources(const msgpack_object *n)
{
    const msgpack_object *total = beam_map_get(n, "resources_total");
    const msgpack_object *avail = beam_map_get(n, "resources_available");
    if (!total || total->type != MSGPACK_OBJECT_MAP)
        return;
    for (uint32_t i = 0; i < total->via.map.size; i++) {
        const msgpack_object *k = &total->via.map.ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR)
            continue;
        char name[160], b[32];
        snprintf(name, sizeof name, "%.*s", (int)k->via.str.size, k->via.str.ptr);
        double t = num(total, name), used = t - num(avail, name);
        bar(b, used, t);
        if (strcmp(name, "memory") == 0 || strcmp(name, "object_store_memory") == 0)
            printf("    %-28s [%s] %.2f/%.2f GiB\n", name, b, used / (1 << 30), t / (1 << 30));
        else
            printf("    %-28s [%s] %g/%g\n", name, b, used, t);
    }
    const msgpack_object_array *gpus = array(n, "gpus");
    for (uint32_t i = 0; gpus && i < gpus->size; i++) {
        char gid[64], label[80], b[32];
        double used = 1.0 - num(&gpus->ptr[i], "available");
        snprintf(label, sizeof label, "GPU %s", str(&gpus->ptr[i], "id", gid, sizeof gid));
        bar(b, used, 1.0);
        printf("      %-26s [%s] %g/1\n", label, b, used);
    }
}

static void print_resources(const nodes_t *nodes)
{
    char id[128], ip[64];
    printf("Resources (used/total)\n");
    for (uint32_t i = 0; i < nodes->n; i++) {
        const msgpack_object *n = nodes->node[i];
        printf("  node %.12s %s%s\n", str(n, "node_id", id, sizeof id), str(n, "node_ip", ip, sizeof ip),
               flag(n, "alive", 1) ? "" : " (dead)");
        print_node_resources(n);
    }
}

static void print_actors(const msgpack_object *st)
{
    const msgpack_object_array *actors = array(st, "actors");
    if (!actors)
        return;
    printf("Actors (%u)\n", actors->size);
    if (actors->size)
        printf("  %-32s %-20s %-16s %-8s %-8s %-8s %-8s %s\n", "ACTOR ID", "CLASS", "STATE", "PID", "GPUS", "RUNNING",
               "QUEUED", "NODE");
    for (uint32_t i = 0; i < actors->size; i++) {
        const msgpack_object *a = &actors->ptr[i];
        char id[64], cls[300], state[32], node[128], gpus[256] = "";
        const msgpack_object_array *g = array(a, "gpu_ids");
        for (uint32_t j = 0; g && j < g->size; j++) {
            char one[32];
            size_t len = strlen(gpus);
            text(&g->ptr[j], one, sizeof one);
            snprintf(gpus + len, sizeof gpus - len, "%s%s", j ? "," : "", one);
        }
        printf("  %-32s %-20s %-16s %-8.0f %-8s %-8.0f %-8.0f %.12s\n", str(a, "actor_id", id, sizeof id),
               str(a, "class_name", cls, sizeof cls), str(a, "state", state, sizeof state), num(a, "pid"),
               *gpus ? gpus : "-", num(a, "running"), num(a, "queued"),
               *str(a, "node_id", node, sizeof node) ? node : "-");
    }
}

/* One bundle's resources as "GPU=1 node:10.0.0.1=0.001". */
static void bundle_text(const msgpack_object *b, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    if (b->type != MSGPACK_OBJECT_MAP)
        return;
    for (uint32_t i = 0; i < b->via.map.size && len < cap; i++) {
        char k[160], v[64];
        text(&b->via.map.ptr[i].key, k, sizeof k);
        text(&b->via.map.ptr[i].val, v, sizeof v);
        len += (size_t)snprintf(out + len, cap - len, "%s%s=%s", i ? " " : "", k, v);
    }
}

static void print_pgs(const msgpack_object *st, const nodes_t *nodes)
{
    enum { MAX_SHOWN = 32 };
    const msgpack_object_array *pgs = array(st, "placement_groups");
    if (!pgs)
        return;
    printf("Placement groups (%u)\n", pgs->size);
    if (pgs->size)
        printf("  %-36s %-13s %-12s %s\n", "PLACEMENT GROUP ID", "STRATEGY", "STATE", "NAME");
    for (uint32_t i = 0; i < pgs->size; i++) {
        const msgpack_object *pg = &pgs->ptr[i];
        char id[64], strategy[32], state[32], name[1100];
        printf("  %-36s %-13s %-12s %s\n", str(pg, "placement_group_id", id, sizeof id),
               str(pg, "strategy", strategy, sizeof strategy), str(pg, "state", state, sizeof state),
               *str(pg, "name", name, sizeof name) ? name : "-");
        const msgpack_object_array *bundles = array(pg, "bundles");
        const msgpack_object_array *where = array(pg, "bundles_to_node_id");
        for (uint32_t j = 0; bundles && j < bundles->size && j < MAX_SHOWN; j++) {
            char res[512], node[128] = "", ip[64];
            bundle_text(&bundles->ptr[j], res, sizeof res);
            /* a removed group's row names the nodes its bundles had (as
             * Ray's table): nothing is reserved there any more */
            if (where && j < where->size && strcmp(state, "REMOVED") != 0)
                text(&where->ptr[j], node, sizeof node);
            if (*node && strcmp(node, "?") != 0)
                printf("    bundle %-4u %-36s -> %s %.12s\n", j, res, node_ip_of(nodes, node, ip, sizeof ip), node);
            else
                printf("    bundle %-4u %-36s -> (not placed)\n", j, res);
        }
        if (bundles && bundles->size > MAX_SHOWN)
            printf("    ... and %u more bundles\n", bundles->size - MAX_SHOWN);
    }
}

static void print_status(const msgpack_object *st)
{
    nodes_t nodes;
    nodes_of(st, &nodes);
    print_nodes(st, &nodes);
    print_resources(&nodes);
    print_actors(st);
    print_pgs(st, &nodes);
    const msgpack_object *objs = beam_map_get(st, "objects");
    double bytes = num(objs, "bytes");
    printf("Objects: %.0f (%.0f bytes", num(objs, "count"), bytes);
    if (bytes >= 1 << 20)
        printf(", %.1f MiB", bytes / (1 << 20));
    else if (bytes >= 1 << 10)
        printf(", %.1f KiB", bytes / (1 << 10));
    printf(")\n");
    const msgpack_object *cl = beam_map_get(st, "clients");
    printf("Clients: %.0f drivers, %.0f workers\n", num(cl, "drivers"), num(cl, "workers"));
}

/* --- talking to the daemon --- */

/* Sends op (hello carries this process's role and pid) and reads frames
 * until its reply. Returns 0 with reply filled (the caller destroys it),
 * -EAGAIN when the socket timed out, -1 with err set otherwise. */
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
        return rc == -EAGAIN || rc == -EWOULDBLOCK ? -EAGAIN : -1;
    }
    for (;;) {
        const char *frame;
        rc = beam_client_read_frame(fd, dec, &frame, &len);
        if (rc <= 0) {
            snprintf(err, errlen, "%s", rc == 0 ? "the daemon closed the connection" : strerror(-rc));
            return rc == -EAGAIN || rc == -EWOULDBLOCK ? -EAGAIN : -1;
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
    enum { O_SOCKET = 1, O_JSON, O_TIMEOUT, O_HELP = 'h' };
    static const struct option longopts[] = {{"socket", 1, 0, O_SOCKET},
                                             {"json", 0, 0, O_JSON},
                                             {"timeout", 1, 0, O_TIMEOUT},
                                             {"help", 0, 0, O_HELP},
                                             {0, 0, 0, 0}};
    char path[108] = "";
    int as_json = 0, c;
    double timeout = 10;
    char *end;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case O_SOCKET:
            if (strlen(optarg) >= sizeof path) {
                fprintf(stderr, "beamctl: socket path too long (at most %zu bytes): %s\n", sizeof path - 1, optarg);
                return 2;
            }
            snprintf(path, sizeof path, "%s", optarg);
            break;
        case O_JSON: as_json = 1; break;
        case O_TIMEOUT:
            timeout = strtod(optarg, &end);
            if (*end || end == optarg || !(timeout > 0) || timeout > 86400) {
                fprintf(stderr, "beamctl: bad --timeout '%s' (seconds, more than 0)\n", optarg);
                return 2;
            }
            break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "beamctl: no command given\n");
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    if (strcmp(cmd, "status") != 0) {
        fprintf(stderr, "beamctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "beamctl: unexpected argument '%s'\n", argv[optind + 1]);
        usage(stderr);
        return 2;
    }
    if (!*path)
        beam_client_socket_path(path, sizeof path);
    unsigned peer = 0;
    int fd = beam_client_connect(path, &peer);
    if (fd == -EPERM) {
        fprintf(stderr, "beamctl: the process serving %s runs as uid %u, not as you (uid %u) or root: "
                "refusing to talk to it\n", path, peer, (unsigned)getuid());
        return 1;
    }
    if (fd < 0) {
        fprintf(stderr, "beamctl: no beamd answers at %s: %s\n", path, strerror(-fd));
        fprintf(stderr, "beamctl: is beamd running? Point at it with --socket PATH or $BEAM_SOCKET.\n");
        return 1;
    }
    /* a daemon that accepts but never answers must not hang us */
    struct timeval tv = {.tv_sec = (time_t)timeout, .tv_usec = (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    beam_limits_t lim;
    beam_limits_default(&lim);
    beam_decoder_t dec;
    beam_decoder_init(&dec, &lim);
    beam_msg_t reply;
    char err[256];
    int rc = 1, io;
    if ((io = request(fd, &dec, 1, "hello", &reply, err, sizeof err)) == 0) {
        beam_msg_destroy(&reply);
        if ((io = request(fd, &dec, 2, "status", &reply, err, sizeof err)) == 0) {
            if (reply.params.type != MSGPACK_OBJECT_MAP) {
                snprintf(err, sizeof err, "the daemon's status is not a map");
            } else {
                if (as_json) {
                    json(stdout, &reply.params);
                    fputc('\n', stdout);
                } else {
                    print_status(&reply.params);
                }
                rc = fflush(stdout) == 0 ? 0 : 1;
                if (rc)
                    snprintf(err, sizeof err, "writing the output: %s", strerror(errno));
            }
            beam_msg_destroy(&reply);
        }
    }
    if (rc) {
        if (io == -EAGAIN)
            fprintf(stderr, "beamctl: no answer from beamd at %s within %g s\n", path, timeout);
        else
            fprintf(stderr, "beamctl: %s: %s\n", path, err);
    }
    beam_decoder_destroy(&dec);
    close(fd);
    return rc;
}
