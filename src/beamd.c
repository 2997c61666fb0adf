/* beamd.c — the daemon's entry point: flags, the node's identity and
 * resources, signals, readiness, the loop, and a clean exit. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utlist.h>

#include "client.h"
#include "cluster.h"
#include "hooks.h"
#include "link.h"
#include "relay.h"
#include "gpu.h"
#include "log.h"
#include "node.h"
#include "notify.h"
#include "server.h"
#include "session.h"

typedef struct options_s {
    const char *socket;
    const char *node_ip;
    double num_cpus; /* < 0: detect */
    int num_gpus;    /* < 0: detect */
    double memory;   /* < 0: detect */
    double store;    /* object_store_memory; < 0: 30% of RAM */
    int ready_fd;
    int exit_with_parent;
    char *resources[BEAM_MAX_DEMAND];
    int nresources;
    int head;              /* --head: listen for member nodes */
    int port;
    const char *address;   /* --address HOST:PORT: join that head */
    const char *token_file;
    const char *listen_ip; /* --listen-ip: where the head listens (default --node-ip) */
    double node_timeout;   /* seconds */
    uint32_t max_handshakes, max_handshakes_per_ip; /* 0: link.h's defaults */
} options_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: beamd [options]\n"
            "  --socket PATH        unix socket to serve (default $BEAM_SOCKET, else per-user)\n"
            "  --num-cpus N         CPUs to offer (default: this machine's)\n"
            "  --num-gpus N         GPUs to offer; N pretend GPUs when the machine has fewer\n"
            "                       (default: the NVIDIA GPUs found, else 0)\n"
            "  --memory BYTES       the 'memory' resource (default: 70%% of RAM)\n"
            "  --object-store-memory BYTES  what values in shared memory may take on this node\n"
            "                       (default: 30%% of RAM, 3/7 of --memory; past it: ObjectStoreFullError)\n"
            "  --resource NAME=N    a custom resource (repeatable)\n"
            "  --node-ip IP         this node's address (default: the default route's, else 127.0.0.1)\n"
            "  --max-frame BYTES    largest frame accepted (default 256 MiB)\n"
            "  --max-depth N        deepest msgpack nesting accepted (default and most: 32)\n"
            "  --max-items N        most msgpack elements in one frame (default 4194304)\n"
            "  --max-str BYTES      longest msgpack str accepted (default 1 MiB)\n"
            "  --max-outq BYTES     unsent bytes after which a client or a node link is dropped\n"
            "                       (default 1 GiB)\n"
            "  --log-level LEVEL    error, warn, info or debug (default info)\n"
            "  --ready-fd FD        write 'ready\\n' to FD once listening, then close it\n"
            "  --exit-with-parent   exit when the process that started beamd exits\n"
            "cluster:\n"
            "  --head               be the head: listen for nodes on --node-ip:--port\n"
            "  --port P             the head's TCP port (default 6379)\n"
            "  --listen-ip IP       where the head listens (default --node-ip; 0.0.0.0: every address)\n"
            "  --address HOST:PORT  join the head there as a node\n"
            "  --token-file PATH    the cluster token (the head makes one when the file is missing)\n"
            "  --node-timeout S     a node or head silent this long is dead (default 3)\n"
            "  --max-handshakes N   head: node connections held in the handshake at once\n"
            "                       (default 64); more are closed at accept\n"
            "  --max-handshakes-per-ip N\n"
            "                       the same, from one address (default 8)\n"
            "  --max-member-clients N\n"
            "                       head: clients one node may have open at once (default 65536);\n"
            "                       more are closed as they open\n"
            "  --help\n");
}

/* The amount s of a resource flag (what: "--num-cpus", "--memory",
 * "--resource NAME"), checked as a resources= amount is (beam_res_amount:
 * Ray's range and precision): 0 with it in *out, or -1 after saying what is
 * wrong on stderr. */
static int check_amount(const char *what, int what_len, const char *s, double *out)
{
    char *end;
    int64_t units;
    double amount = strtod(s, &end);
    int rc = *s && !*end ? beam_res_amount(amount, &units) : -EINVAL;
    if (rc == -ERANGE)
        fprintf(stderr, "beamd: %.*s: the amount must be 0, or from 0.0001 up to 1e14 (Ray's range)\n", what_len,
                what);
    else if (rc < 0)
        fprintf(stderr, "beamd: %.*s: the amount must be a number >= 0\n", what_len, what);
    *out = amount;
    return rc < 0 ? -1 : 0;
}

/* A --resource NAME=N: a name of 1..127 bytes and an amount (check_amount).
 * Says what is wrong on stderr and returns -1. */
static int check_resource(const char *arg)
{
    const char *eq = strchr(arg, '=');
    double amount;
    if (!eq || eq == arg || eq - arg >= BEAM_RES_NAME_LEN) {
        fprintf(stderr, "beamd: --resource takes NAME=N with a name of 1..%d bytes\n", BEAM_RES_NAME_LEN - 1);
        return -1;
    }
    char what[BEAM_RES_NAME_LEN + 16];
    int n = snprintf(what, sizeof what, "--resource %.*s", (int)(eq - arg), arg);
    return check_amount(what, n, eq + 1, &amount);
}

/* What a worker adds to its nice value, as Ray's raylet reads its
 * worker_niceness: RAY_worker_niceness from the environment, else 15, so a
 * node's workers yield the CPU to the driver that feeds them. */
static int worker_niceness(void)
{
    const char *s = getenv("RAY_worker_niceness");
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : 15;
    if (s && *s && (*end || v < -20 || v > 19)) {
        beam_log(BEAM_LOG_WARN, "RAY_worker_niceness=%s is not a whole number from -20 to 19: 15 is used", s);
        v = 15;
    }
    return (int)v;
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || v == 0 || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_options(int argc, char **argv, options_t *o, beam_node_t *node)
{
    enum { O_HANDSHAKES = 100, O_HANDSHAKES_IP, O_MEMBER_CLIENTS }; /* getopt's values: any distinct ones */
    enum { O_SOCKET = 1, O_CPUS, O_GPUS, O_MEM, O_RES, O_IP, O_FRAME, O_DEPTH, O_ITEMS, O_STR, O_OUTQ,
           O_LOG, O_READY, O_PARENT, O_HELP, O_HEAD, O_PORT, O_ADDRESS, O_TOKEN, O_TIMEOUT, O_LISTEN, O_STORE };
    static const struct option longopts[] = {
        {"socket", 1, 0, O_SOCKET},     {"num-cpus", 1, 0, O_CPUS},  {"num-gpus", 1, 0, O_GPUS},
        {"memory", 1, 0, O_MEM},        {"resource", 1, 0, O_RES},   {"node-ip", 1, 0, O_IP},
        {"max-frame", 1, 0, O_FRAME},   {"max-depth", 1, 0, O_DEPTH}, {"max-items", 1, 0, O_ITEMS},
        {"max-str", 1, 0, O_STR},       {"max-outq", 1, 0, O_OUTQ},  {"log-level", 1, 0, O_LOG},
        {"ready-fd", 1, 0, O_READY},    {"exit-with-parent", 0, 0, O_PARENT}, {"help", 0, 0, O_HELP},
        {"max-handshakes", 1, 0, O_HANDSHAKES}, {"max-handshakes-per-ip", 1, 0, O_HANDSHAKES_IP},
        {"max-member-clients", 1, 0, O_MEMBER_CLIENTS},
        {"head", 0, 0, O_HEAD},         {"port", 1, 0, O_PORT},      {"address", 1, 0, O_ADDRESS},
        {"token-file", 1, 0, O_TOKEN},  {"node-timeout", 1, 0, O_TIMEOUT},
        {"listen-ip", 1, 0, O_LISTEN},  {"object-store-memory", 1, 0, O_STORE},
        {0, 0, 0, 0},
    };
    int c;
    char *end;
    uint32_t u;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_SOCKET: o->socket = optarg; break;
        case O_CPUS:
            if (check_amount("--num-cpus", 10, optarg, &o->num_cpus) < 0) goto bad;
            break;
        case O_GPUS:
            o->num_gpus = (int)strtol(optarg, &end, 10);
            if (*end || o->num_gpus < 0 || o->num_gpus > BEAM_MAX_GPUS) goto bad;
            break;
        case O_MEM:
            if (check_amount("--memory", 8, optarg, &o->memory) < 0) goto bad;
            break;
        case O_STORE:
            o->store = strtod(optarg, &end);
            if (*end || o->store < 0) goto bad;
            break;
        case O_RES:
            if (o->nresources == BEAM_MAX_DEMAND || check_resource(optarg) < 0) goto bad;
            o->resources[o->nresources++] = optarg;
            break;
        case O_IP: o->node_ip = optarg; break;
        case O_FRAME: if (parse_u32(optarg, &u)) goto bad; node->limits.max_frame = u; break;
        case O_DEPTH: if (parse_u32(optarg, &u) || u > 32) goto bad; node->limits.max_depth = u; break;
        case O_ITEMS: if (parse_u32(optarg, &u)) goto bad; node->limits.max_items = u; break;
        case O_STR: if (parse_u32(optarg, &u)) goto bad; node->limits.max_str = u; break;
        case O_OUTQ:
            node->max_outq = strtoull(optarg, &end, 10);
            if (*end || node->max_outq == 0) goto bad;
            break;
        case O_LOG: {
            int level = beam_log_parse_level(optarg);
            if (level < 0) goto bad;
            beam_log_set_level(level);
            break;
        }
        case O_READY:
            o->ready_fd = (int)strtol(optarg, &end, 10);
            if (*end || o->ready_fd < 0) goto bad;
            break;
        case O_PARENT: o->exit_with_parent = 1; break;
        case O_HEAD: o->head = 1; break;
        case O_PORT:
            o->port = (int)strtol(optarg, &end, 10);
            if (*end || o->port <= 0 || o->port > 65535) goto bad;
            break;
        case O_ADDRESS: o->address = optarg; break;
        case O_TOKEN: o->token_file = optarg; break;
        case O_LISTEN: o->listen_ip = optarg; break;
        case O_TIMEOUT:
            o->node_timeout = strtod(optarg, &end);
            if (*end || o->node_timeout <= 0) goto bad;
            break;
        case O_HANDSHAKES:
            if (parse_u32(optarg, &u) || u > 65536) goto bad;
            o->max_handshakes = u;
            break;
        case O_HANDSHAKES_IP:
            if (parse_u32(optarg, &u) || u > 65536) goto bad;
            o->max_handshakes_per_ip = u;
            break;
        case O_MEMBER_CLIENTS:
            if (parse_u32(optarg, &u) || u > BEAM_MAX_MEMBER_CLIENTS) goto bad;
            node->max_member_clients = u;
            break;
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "beamd: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->head && o->address) {
        fprintf(stderr, "beamd: --head and --address are exclusive\n");
        return -1;
    }
    if (o->address && !o->token_file) {
        fprintf(stderr, "beamd: --address needs --token-file (the head's cluster token)\n");
        return -1;
    }
    return 0;
bad:
    {
        size_t i = 0;
        while (longopts[i].name && longopts[i].val != c)
            i++;
        fprintf(stderr, "beamd: bad value '%s' for --%s\n", optarg, longopts[i].name ? longopts[i].name : "?");
    }
    return -1;
}

/* The address of the interface the default route leaves by, read from
 * /proc/net/route and getifaddrs (no packet is sent). */
static int default_route_ip(char *out, size_t n)
{
    FILE *f = fopen("/proc/net/route", "r");
    if (!f)
        return -1;
    char line[512], iface[IF_NAMESIZE + 1] = "";
    unsigned long dest, flags;
    while (fgets(line, sizeof line, f)) {
        char name[IF_NAMESIZE + 1];
        if (sscanf(line, "%16s %lx %*x %lx", name, &dest, &flags) == 3 && dest == 0 && (flags & 1)) {
            snprintf(iface, sizeof iface, "%s", name);
            break;
        }
    }
    fclose(f);
    if (!*iface)
        return -1;
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) != 0)
        return -1;
    int rc = -1;
    for (i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, iface) == 0) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)n);
            rc = 0;
            break;
        }
    freeifaddrs(ifs);
    return rc;
}

static int setup_resources(beam_node_t *node, const options_t *o)
{
    beam_pool_t *pool = &node->pool;
    double cpus = o->num_cpus >= 0 ? o->num_cpus : (double)uv_available_parallelism();
    double memory = o->memory >= 0 ? o->memory : 0.7 * (double)uv_get_total_memory();
    char name[BEAM_RES_NAME_LEN];
    int rc = beam_pool_add(pool, "CPU", beam_res_units(cpus));
    rc |= beam_pool_add(pool, "memory", beam_res_units(memory));
    double store = o->store >= 0 ? o->store : memory * 0.3 / 0.7;
    node->shm_budget = (size_t)store;
    rc |= beam_pool_add(pool, "object_store_memory", beam_res_units(store));
    snprintf(name, sizeof name, "node:%s", node->node_ip);
    rc |= beam_pool_add(pool, name, BEAM_RES_UNIT);
    if (node->is_head)
        rc |= beam_pool_add(pool, "node:__internal_head__", BEAM_RES_UNIT);
    char ids[BEAM_MAX_GPUS][BEAM_GPU_ID_LEN];
    int ngpus = beam_gpu_detect(ids, BEAM_MAX_GPUS);
    if (o->num_gpus >= 0) {
        /* asked for N: the first N found, then pretend ones */
        for (int i = ngpus; i < o->num_gpus; i++)
            snprintf(ids[i], BEAM_GPU_ID_LEN, "%d", i);
        ngpus = o->num_gpus;
    }
    for (int i = 0; i < ngpus; i++)
        rc |= beam_pool_add_gpu(pool, ids[i]);
    for (int i = 0; i < o->nresources; i++) {
        char *eq = strchr(o->resources[i], '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - o->resources[i]), o->resources[i]);
        rc |= beam_pool_add(pool, name, beam_res_units(strtod(eq + 1, NULL)));
    }
    return rc ? -1 : 0;
}

/* A daemon holds one fd per client and a few per worker, and a soft limit
 * of 1024 (a common default) would refuse clients long before memory runs
 * short: take the hard limit, up to 65536 (workers inherit it, and some
 * programs still close every fd up to the limit when they fork). */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            beam_log(BEAM_LOG_WARN, "could not raise the open file limit: %s", strerror(errno));
    }
}

/* Objects live in beamd's heap, so a large put or result is a large malloc.
 * glibc's default raises its mmap threshold to the size of the last large
 * block freed (up to 32 MiB) and keeps up to twice that at the heap's top, so
 * after a few large objects beamd would hold tens of MiB it no longer uses.
 * A fixed threshold keeps blocks of 1 MiB and up in their own mappings,
 * returned to the system when freed. */
static void tune_malloc(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 4 << 20);
#endif
}

static uv_signal_t sigterm, sigint;
static beam_server_t server;

/* Prepares the cluster options: the token and where to listen or join. */
static int cluster_options(beam_node_t *node, const options_t *o, beam_cluster_opts_t *co, char *path,
                           size_t pathlen)
{
    char err[256];
    memset(co, 0, sizeof *co);
    co->timeout_ms = (uint64_t)((o->node_timeout > 0 ? o->node_timeout : 3.0) * 1000);
    co->heartbeat_ms = co->timeout_ms / 4 ? co->timeout_ms / 4 : 1;
    co->listen_ip = o->listen_ip ? o->listen_ip : node->node_ip;
    co->port = o->port ? o->port : 6379;
    co->max_handshakes = (int)o->max_handshakes;
    co->max_handshakes_per_ip = (int)o->max_handshakes_per_ip;
    if (o->address) {
        static char host[64];
        const char *colon = strrchr(o->address, ':');
        if (!colon || colon == o->address || (size_t)(colon - o->address) >= sizeof host) {
            fprintf(stderr, "beamd: --address takes HOST:PORT\n");
            return -1;
        }
        snprintf(host, sizeof host, "%.*s", (int)(colon - o->address), o->address);
        co->head_host = host;
        co->head_port = atoi(colon + 1);
        if (beam_token_read(o->token_file, co->token, err, sizeof err) < 0) {
            fprintf(stderr, "beamd: %s\n", err);
            return -1;
        }
        return 0;
    }
    if (o->token_file && access(o->token_file, R_OK) == 0) {
        snprintf(path, pathlen, "%s", o->token_file);
        if (beam_token_read(path, co->token, err, sizeof err) < 0) {
            fprintf(stderr, "beamd: %s\n", err);
            return -1;
        }
        return 0;
    }
    if (o->token_file)
        snprintf(path, pathlen, "%s", o->token_file);
    else {
        snprintf(path, pathlen, "%s", node->socket_path);
        char *slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, pathlen - (size_t)(slash ? slash + 1 - path : 0), "cluster.token");
    }
    if (beam_token_create(path, co->token, err, sizeof err) < 0) {
        fprintf(stderr, "beamd: %s\n", err);
        return -1;
    }
    return 0;
}

/* Tells whoever waits (the service manager, --ready-fd) that beamd serves. */
static void announce_ready(beam_node_t *node)
{
    if (node->announced)
        return;
    node->announced = 1;
    char status[256];
    snprintf(status, sizeof status, "serving %s", node->socket_path);
    beam_notify_ready(status);
    if (node->ready_fd >= 0) {
        ssize_t w = write(node->ready_fd, "ready\n", 6);
        (void)w;
        close(node->ready_fd);
        node->ready_fd = -1;
    }
}

static void stop(beam_node_t *node, const char *why)
{
    if (node->stopping)
        return;
    node->stopping = 1;
    beam_log(BEAM_LOG_INFO, "stopping: %s", why);
    beam_notify_stopping();
    beam_server_close(&server);
    beam_node_stop(node, "beamd is shutting down");
    uv_close((uv_handle_t *)&sigterm, NULL);
    uv_close((uv_handle_t *)&sigint, NULL);
}

static void on_signal(uv_signal_t *s, int signum)
{
    stop(s->loop->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

int main(int argc, char **argv)
{
    static beam_node_t node;
    options_t o = {.num_cpus = -1, .num_gpus = -1, .memory = -1, .store = -1, .ready_fd = -1};
    beam_limits_default(&node.limits);
    node.max_outq = (size_t)1 << 30;
    if (parse_options(argc, argv, &o, &node) < 0)
        return 2;
    node.soft_outq = node.max_outq / 16 < ((size_t)64 << 20) ? node.max_outq / 16 : ((size_t)64 << 20);
    if (o.exit_with_parent) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1)
            return 1; /* the parent is already gone */
    }
    signal(SIGPIPE, SIG_IGN);
    umask(077);
    raise_fd_limit();
    tune_malloc();

    uv_loop_t *loop = uv_default_loop();
    loop->data = &node;
    node.loop = loop;
    node.node_index = 1;
    node.worker_niceness = worker_niceness();
    node.is_head = o.address == NULL;
    node.start_ms = uv_now(loop);
    if (beam_random(node.node_id, sizeof node.node_id) < 0) {
        fprintf(stderr, "beamd: no random bytes for the node id\n");
        return 1;
    }
    beam_id_hex(node.node_id, sizeof node.node_id, node.node_hex);
    if (o.node_ip)
        snprintf(node.node_ip, sizeof node.node_ip, "%s", o.node_ip);
    else if (default_route_ip(node.node_ip, sizeof node.node_ip) < 0)
        snprintf(node.node_ip, sizeof node.node_ip, "127.0.0.1");
    if (gethostname(node.hostname, sizeof node.hostname) != 0)
        snprintf(node.hostname, sizeof node.hostname, "localhost");
    beam_pool_init(&node.pool);
    if (setup_resources(&node, &o) < 0) {
        fprintf(stderr, "beamd: bad resource settings\n");
        return 2;
    }

    char path[108];
    if (o.socket)
        snprintf(path, sizeof path, "%s", o.socket);
    else
        beam_client_socket_path(path, sizeof path);
    char err[256];
    if (beam_server_listen(&server, &node, path, err, sizeof err) < 0) {
        fprintf(stderr, "beamd: %s\n", err);
        beam_pool_destroy(&node.pool);
        return 1;
    }
    snprintf(node.socket_path, sizeof node.socket_path, "%s", server.path);
    beam_sessions_init(loop, &node);
    beam_hooks_wire(&node);
    if (beam_cluster_init_self(&node) < 0) {
        fprintf(stderr, "beamd: out of memory\n");
        return 1;
    }
    char token_path[256] = "";
    beam_cluster_opts_t co;
    if ((o.head || o.address) && cluster_options(&node, &o, &co, token_path, sizeof token_path) < 0) {
        beam_server_close(&server);
        return 2;
    }
    if (o.head) {
        if (beam_relay_listen(&node, &co, err, sizeof err) < 0) {
            fprintf(stderr, "beamd: %s\n", err);
            beam_server_close(&server);
            return 1;
        }
        fprintf(stderr, "beamd: head listening for nodes on %s:%d. To join a node, run on it:\n"
                        "  beamd --address %s:%d --token-file %s --node-ip <that node's ip>\n"
                        "(copy %s there first; it is the cluster's secret)\n",
                co.listen_ip, co.port, node.node_ip, co.port, token_path, token_path);
    } else if (o.address) {
        if (beam_relay_join(&node, &co) < 0) {
            fprintf(stderr, "beamd: cannot join %s\n", o.address);
            beam_server_close(&server);
            return 1;
        }
    }

    uv_signal_init(loop, &sigterm);
    uv_signal_init(loop, &sigint);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_signal_start(&sigint, on_signal, SIGINT);

    const beam_res_entry_t *gpu = beam_pool_find(&node.pool, "GPU");
    const beam_res_entry_t *cpu = beam_pool_find(&node.pool, "CPU");
    beam_log(BEAM_LOG_INFO, "node %s ip %s listening on %s (%.4g CPUs, %d GPUs)", node.node_hex, node.node_ip,
             node.socket_path, cpu ? (double)cpu->total / BEAM_RES_UNIT : 0.0, gpu ? node.pool.ngpus : 0);
    node.ready_fd = o.ready_fd;
    node.on_joined = announce_ready;
    if (!o.address)
        announce_ready(&node); /* a member is ready once its head has welcomed it */

    uv_run(loop, UV_RUN_DEFAULT);

    beam_node_free(&node);
    int rc = uv_loop_close(loop);
    if (rc != 0)
        beam_log(BEAM_LOG_WARN, "loop closed with handles open: %s", uv_strerror(rc));
    beam_log(BEAM_LOG_INFO, "stopped");
    return 0;
}
