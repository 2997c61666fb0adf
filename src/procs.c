/* procs.c — worker subprocesses: spawn, output relay, kill, exit. */
#define _GNU_SOURCE
#include "procs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"

extern char **environ;

#define LINE_MAX_BYTES (64 * 1024)

static void proc_free(beam_node_t *node, beam_proc_t *p)
{
    HASH_DEL(node->procs, p);
    free(p->class_name);
    free(p->out_line.buf);
    free(p->err_line.buf);
    free(p);
}

static void maybe_free(beam_node_t *node, beam_proc_t *p)
{
    if (p->open_handles == 0 && !p->running)
        proc_free(node, p);
}

static void emit_line(beam_node_t *node, beam_proc_t *p, int stream, const char *line, size_t n)
{
    /* class names are at most 256 bytes (dispatch checks), so this holds the
     * whole prefix; the clamp keeps a longer one from reading past it */
    char prefix[320];
    int plen = snprintf(prefix, sizeof prefix, "(%s pid=%ld) ", p->class_name, p->pid);
    if (plen < 0)
        plen = 0;
    if ((size_t)plen >= sizeof prefix)
        plen = (int)sizeof prefix - 1;
    size_t len = (size_t)plen + n;
    char *text = malloc(len + 1);
    if (!text)
        return;
    memcpy(text, prefix, (size_t)plen);
    memcpy(text + plen, line, n);
    text[len] = '\0';
    beam_log(BEAM_LOG_INFO, "%s", text);
    if (node->on_proc_output)
        node->on_proc_output(node, p->actor, stream, text, len);
    free(text);
}

/* Splits what the worker printed into lines; a line past LINE_MAX_BYTES is
 * emitted in pieces so a worker cannot grow the buffer without bound. */
static void take_output(beam_node_t *node, beam_proc_t *p, int stream, const char *s, size_t n)
{
    beam_line_t *l = stream == 1 ? &p->out_line : &p->err_line;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n' || l->len == LINE_MAX_BYTES) {
            emit_line(node, p, stream, l->buf ? l->buf : "", l->len);
            l->len = 0;
            if (s[i] == '\n')
                continue;
        }
        if (l->len == l->cap) {
            size_t cap = l->cap ? l->cap * 2 : 256;
            char *nb = realloc(l->buf, cap);
            if (!nb)
                return;
            l->buf = nb;
            l->cap = cap;
        }
        l->buf[l->len++] = s[i];
    }
}

static void on_handle_close(uv_handle_t *h)
{
    beam_proc_t *p = h->data;
    p->open_handles--;
    maybe_free(h->loop->data, p);
}

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, on_handle_close);
}

static void on_output_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    buf->base = malloc(suggested);
    buf->len = buf->base ? suggested : 0;
}

static void on_output(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    beam_proc_t *p = s->data;
    beam_node_t *node = s->loop->data;
    int stream = s == (uv_stream_t *)&p->out ? 1 : 2;
    if (nread > 0)
        take_output(node, p, stream, buf->base, (size_t)nread);
    free(buf->base);
    if (nread < 0) {
        beam_line_t *l = stream == 1 ? &p->out_line : &p->err_line;
        if (l->len)
            emit_line(node, p, stream, l->buf, l->len);
        l->len = 0;
        close_handle((uv_handle_t *)s);
    }
}

/* --- what a dead worker leaves behind ---
 *
 * No process an actor started may outlive it. The worker is a child
 * subreaper (ray/_worker.py), so while it lives everything it starts stays
 * below it, double forks and new sessions included; beamd is one too, so
 * when the worker dies all of that is re-parented to beamd. Any child of
 * beamd that is not a worker is therefore such a leftover: sweep kills it,
 * and each one's own children come to beamd as it dies, for the next pass.
 * (When beamd itself dies the worker kills its descendants: _worker.py.) */
#define SWEEP_MS 10
#define SWEEP_ROUNDS 1000 /* 10 s: past that a process stuck in the kernel is left to init */

static int is_worker(const beam_node_t *node, long pid)
{
    for (const beam_proc_t *p = node->procs; p; p = p->hh.next)
        if (p->pid == pid)
            return 1;
    return 0;
}

/* One pass over /proc: SIGKILLs the live children of beamd that are not
 * workers and reaps the dead ones. Returns how many it found. */
static int sweep_once(const beam_node_t *node)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    long self = (long)getpid();
    int found = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        /* "pid (comm) state ppid ...": comm may hold spaces and parentheses */
        const char *rp = strrchr(buf, ')');
        char state;
        long ppid;
        if (!rp || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2 || ppid != self || is_worker(node, pid))
            continue;
        found++;
        if (state == 'Z')
            waitpid((pid_t)pid, NULL, WNOHANG);
        else
            kill((pid_t)pid, SIGKILL);
    }
    closedir(d);
    return found;
}

static void on_sweep(uv_timer_t *t)
{
    beam_proc_t *p = t->data;
    beam_node_t *node = t->loop->data;
    if (sweep_once(node) > 0 && ++p->sweep_rounds < SWEEP_ROUNDS)
        return;
    if (p->sweep_rounds >= SWEEP_ROUNDS)
        beam_log(BEAM_LOG_WARN, "processes left by worker %ld of actor %s did not die", p->pid, p->hex);
    uv_timer_stop(t);
    close_handle((uv_handle_t *)t);
}

static void sweep_start(beam_node_t *node, beam_proc_t *p)
{
    if (sweep_once(node) == 0)
        return;
    uv_timer_init(node->loop, &p->sweep);
    p->sweep.data = p;
    p->open_handles++;
    uv_timer_start(&p->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
}

static void on_exit_cb(uv_process_t *proc, int64_t status, int term_signal)
{
    beam_proc_t *p = proc->data;
    beam_node_t *node = proc->loop->data;
    p->running = 0;
    /* the processes the worker started go with it: its group now, whatever
     * left the group as it is re-parented here */
    if (p->pid > 0)
        kill(-(pid_t)p->pid, SIGKILL);
    sweep_start(node, p);
    beam_log(BEAM_LOG_DEBUG, "worker %ld of actor %s exited (status %lld, signal %d)", p->pid, p->hex,
             (long long)status, term_signal);
    char actor[BEAM_ACTOR_ID_SIZE];
    memcpy(actor, p->actor, sizeof actor);
    long pid = p->pid;
    close_handle((uv_handle_t *)proc);
    if (node->on_proc_exit)
        node->on_proc_exit(node, actor, pid, status, term_signal);
}

/* Variables beam sets for every worker; a runtime_env may not replace them
 * (CUDA_VISIBLE_DEVICES is the GPU assignment itself, as in Ray). */
static const char *const beam_vars[] = {
    "PYTHONPATH=", "PYTHONUNBUFFERED=", "BEAM_SOCKET=", "BEAM_ACTOR_ID=", "BEAM_WORKER_TOKEN=",
    "BEAM_NODE_ID=", "BEAM_NODE_IP=", "BEAM_GPU_IDS=", "BEAM_DRIVER_PID=", "BEAM_PARENT_PID=", "SPT_NOENV=", NULL,
};

/* 1 if kv ("K=V") starts with one of the "K=" prefixes in list. */
static int has_prefix(const char *kv, const char *const *list)
{
    for (const char *const *p = list; *p; p++)
        if (strncmp(kv, *p, strlen(*p)) == 0)
            return 1;
    return 0;
}

static int beam_owned(const char *kv, int noset_cuda)
{
    return has_prefix(kv, beam_vars) || (!noset_cuda && strncmp(kv, "CUDA_VISIBLE_DEVICES=", 21) == 0);
}

/* 1 if env sets the variable named by key[0..klen). */
static int env_has(char *const *env, const char *key, size_t klen)
{
    for (char *const *e = env; e && *e; e++)
        if (strncmp(*e, key, klen) == 0 && (*e)[klen] == '=')
            return 1;
    return 0;
}

/* A variable of the daemon's own environment that the worker does not
 * inherit: beam's, CUDA_VISIBLE_DEVICES (set from the assignment), the
 * service manager's channels (beamd's alone), or one the runtime_env sets. */
static int env_overridden(const char *kv, char *const *extra)
{
    static const char *const service[] = {"NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=", "LISTEN_FDS=",
                                          "LISTEN_PID=", "LISTEN_FDNAMES=", NULL};
    if (has_prefix(kv, service) || beam_owned(kv, 0))
        return 1;
    const char *eq = strchr(kv, '=');
    return env_has(extra, kv, eq ? (size_t)(eq - kv) : strlen(kv));
}

static char *kv(const char *key, const char *value)
{
    size_t n = strlen(key) + strlen(value) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s=%s", key, value);
    return s;
}

static char *join_path(char *const *sys_path)
{
    size_t plen = 1;
    for (char *const *p = sys_path; p && *p; p++)
        plen += strlen(*p) + 1;
    char *out = calloc(1, plen);
    for (char *const *p = sys_path; out && p && *p; p++)
        if (**p) {
            if (*out)
                strcat(out, ":");
            strcat(out, *p);
        }
    return out;
}

/* The worker's environment: the daemon's, less what beam sets, plus the
 * runtime_env's variables, plus beam's own. NULL when memory runs out. */
static char **worker_env(beam_node_t *node, const beam_spawn_t *s, const char *hex)
{
    size_t n = 0, extra = 0;
    for (char **e = environ; *e; e++)
        n++;
    for (char *const *e = s->env; e && *e; e++)
        extra++;
    char **env = calloc(n + extra + 16, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    int fail = 0;
    for (char **e = environ; *e; e++)
        if (!env_overridden(*e, s->env))
            fail |= !(env[k++] = strdup(*e));
    for (char *const *e = s->env; e && *e; e++)
        if (!beam_owned(*e, s->noset_cuda))
            fail |= !(env[k++] = strdup(*e));
    char *pypath = join_path(s->sys_path);
    char num[32];
    fail |= !pypath;
    fail |= !(env[k++] = kv("PYTHONPATH", pypath ? pypath : ""));
    free(pypath);
    fail |= !(env[k++] = kv("PYTHONUNBUFFERED", "1"));
    /* as Ray's raylet: setproctitle (vLLM names its workers) then writes the
     * title over argv alone and leaves /proc/PID/environ readable */
    fail |= !(env[k++] = kv("SPT_NOENV", "1"));
    fail |= !(env[k++] = kv("BEAM_SOCKET", node->socket_path));
    fail |= !(env[k++] = kv("BEAM_ACTOR_ID", hex));
    fail |= !(env[k++] = kv("BEAM_WORKER_TOKEN", s->token));
    fail |= !(env[k++] = kv("BEAM_NODE_ID", node->node_hex));
    fail |= !(env[k++] = kv("BEAM_NODE_IP", node->node_ip));
    fail |= !(env[k++] = kv("BEAM_GPU_IDS", s->gpus));
    snprintf(num, sizeof num, "%u", s->owner_pid);
    fail |= !(env[k++] = kv("BEAM_DRIVER_PID", num));
    snprintf(num, sizeof num, "%ld", (long)getpid());
    fail |= !(env[k++] = kv("BEAM_PARENT_PID", num));
    snprintf(num, sizeof num, "%d", node->worker_niceness);
    fail |= !(env[k++] = kv("BEAM_WORKER_NICENESS", num));
    if (!s->noset_cuda)
        fail |= !(env[k++] = kv("CUDA_VISIBLE_DEVICES", s->gpus));
    else if (getenv("CUDA_VISIBLE_DEVICES") && !env_has(s->env, "CUDA_VISIBLE_DEVICES", 20))
        fail |= !(env[k++] = kv("CUDA_VISIBLE_DEVICES", getenv("CUDA_VISIBLE_DEVICES")));
    if (fail) {
        beam_strv_free(env);
        return NULL;
    }
    return env;
}

/* A worker that exited and still drains its pipes (or sweeps what it left)
 * while a new worker starts for its actor (a restart): it keeps reporting
 * under the actor's id, but is filed under a key of its own, one no actor id
 * has (its first bytes, an actor's node index, all 0xff). */
static void set_aside(beam_node_t *node, beam_proc_t *p)
{
    HASH_DEL(node->procs, p);
    memset(p->key, 0xff, sizeof p->key);
    memcpy(p->key + sizeof p->key - sizeof p, &p, sizeof p);
    HASH_ADD(hh, node->procs, key, BEAM_ACTOR_ID_SIZE, p);
}

int beam_proc_spawn(beam_node_t *node, const beam_spawn_t *s, long *pid)
{
    beam_proc_t *p = NULL;
    HASH_FIND(hh, node->procs, s->actor, BEAM_ACTOR_ID_SIZE, p);
    if (p && p->running)
        return UV_EEXIST;
    if (p)
        set_aside(node, p);
    p = calloc(1, sizeof *p);
    if (!p)
        return UV_ENOMEM;
    memcpy(p->key, s->actor, BEAM_ACTOR_ID_SIZE);
    memcpy(p->actor, s->actor, BEAM_ACTOR_ID_SIZE);
    beam_id_hex(s->actor, BEAM_ACTOR_ID_SIZE, p->hex);
    p->class_name = strdup(s->class_name);
    char **env = worker_env(node, s, p->hex);
    if (!env || !p->class_name) {
        beam_strv_free(env);
        free(p->class_name);
        free(p);
        return UV_ENOMEM;
    }
    HASH_ADD(hh, node->procs, key, BEAM_ACTOR_ID_SIZE, p);
    /* what a dead worker leaves is re-parented here, for sweep to kill */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        beam_log(BEAM_LOG_WARN, "could not become a child subreaper: %s", strerror(errno));
    char *args[] = {(char *)s->python, "-m", "ray._worker", NULL};
    uv_stdio_container_t stdio[3];
    uv_pipe_init(node->loop, &p->out, 0);
    uv_pipe_init(node->loop, &p->err, 0);
    p->out.data = p->err.data = p->proc.data = p;
    p->open_handles = 3;
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&p->out;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&p->err;
    uv_process_options_t opt = {
        .exit_cb = on_exit_cb,
        .file = s->python,
        .args = args,
        .env = env,
        /* the driver's folder, or / where that folder does not exist here */
        .cwd = (s->cwd && *s->cwd && access(s->cwd, X_OK) == 0) ? s->cwd : "/",
        /* beamd's session, as Ray's workers stay in the raylet's: a session
         * of its own would be a scheduling group of its own where the kernel
         * groups by session (autogroup), sharing the CPU with the driver as
         * another user's login would. The worker makes its own process group
         * first thing (ray/_worker.py), so a kill reaches what it starts. */
        .flags = 0,
        .stdio_count = 3,
        .stdio = stdio,
    };
    int rc = uv_spawn(node->loop, &p->proc, &opt);
    beam_strv_free(env);
    if (rc < 0) {
        beam_log(BEAM_LOG_ERROR, "could not start a worker for actor %s (%s): %s", p->hex, s->python,
                 uv_strerror(rc));
        close_handle((uv_handle_t *)&p->proc);
        close_handle((uv_handle_t *)&p->out);
        close_handle((uv_handle_t *)&p->err);
        return rc;
    }
    p->running = 1;
    p->pid = p->proc.pid;
    uv_read_start((uv_stream_t *)&p->out, on_output_alloc, on_output);
    uv_read_start((uv_stream_t *)&p->err, on_output_alloc, on_output);
    beam_log(BEAM_LOG_INFO, "actor %s (%s) started as pid %ld, GPUs [%s]", p->hex, s->class_name, p->pid,
             s->gpus);
    *pid = p->pid;
    return 0;
}

int beam_proc_kill(beam_node_t *node, const char *actor)
{
    beam_proc_t *p = NULL;
    HASH_FIND(hh, node->procs, actor, BEAM_ACTOR_ID_SIZE, p);
    if (!p || !p->running || p->pid <= 0)
        return -ENOENT;
    kill(-(pid_t)p->pid, SIGKILL);
    kill((pid_t)p->pid, SIGKILL);
    return 0;
}

int beam_proc_rebind(beam_node_t *node, const char *from, const char *to, const char *class_name)
{
    beam_proc_t *p = NULL;
    HASH_FIND(hh, node->procs, from, BEAM_ACTOR_ID_SIZE, p);
    if (!p || !p->running)
        return -ENOENT;
    char *name = strdup(class_name);
    if (!name)
        return -ENOMEM;
    beam_proc_t *old = NULL; /* (one of `to` that exited and still drains) */
    HASH_FIND(hh, node->procs, to, BEAM_ACTOR_ID_SIZE, old);
    if (old && old->running) {
        free(name);
        return -EEXIST;
    }
    if (old)
        set_aside(node, old);
    HASH_DEL(node->procs, p);
    free(p->class_name);
    p->class_name = name;
    memcpy(p->key, to, BEAM_ACTOR_ID_SIZE);
    memcpy(p->actor, to, BEAM_ACTOR_ID_SIZE);
    beam_id_hex(to, BEAM_ACTOR_ID_SIZE, p->hex);
    HASH_ADD(hh, node->procs, key, BEAM_ACTOR_ID_SIZE, p);
    return 0;
}

void beam_procs_kill_all(beam_node_t *node)
{
    for (beam_proc_t *p = node->procs; p; p = p->hh.next)
        if (p->running && p->pid > 0) {
            kill(-(pid_t)p->pid, SIGKILL);
            kill((pid_t)p->pid, SIGKILL);
        }
}

size_t beam_procs_running(const beam_node_t *node)
{
    size_t n = 0;
    for (const beam_proc_t *p = node->procs; p; p = p->hh.next)
        n += p->running;
    return n;
}
