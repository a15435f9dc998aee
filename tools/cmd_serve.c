/* tartan serve: an HTTP/JSON search service over one or more indexes (doc/server.md).
 * This file is the command: options, the listening socket, start-up errors, and the
 * wait for SIGTERM/SIGINT that begins a graceful shutdown. The server is tools/serve/. */
#include "cli.h"
#include "serve/serve.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan serve --index [NAME=]DIR [--index [NAME=]DIR ...] [options]\n"
        "\n"
        "Serves searches, adds and deletes over HTTP/JSON (doc/server.md, doc/openapi.yaml):\n"
        "  POST /indexes/NAME/search   {\"queries\": [[[f, ...], ...], ...], \"k\": 10}\n"
        "  POST /indexes/NAME/add, /delete, /compact; GET /indexes/NAME/info, /indexes,\n"
        "  /health, /metrics (Prometheus). Searches answer from a snapshot; a generation\n"
        "  published by this server or by another process (tartan add) is picked up.\n"
        "\n"
        "  --index [NAME=]DIR     an index to serve (NAME: default the directory's last\n"
        "                         component; letters, digits, '.', '_', '-')\n"
        "  --listen HOST:PORT     address to listen on (default 127.0.0.1:8080; port 0: any\n"
        "                         free port, printed on stdout). Only loopback unless given\n"
        "  --threads T            searches run at once (default: CPUs; 0: CPUs)\n"
        "  --queue N              requests waiting for a search slot before 503 (default 64)\n"
        "  --timeout S            idle connection timeout and longest queue wait (default 30)\n"
        "  --max-connections N    connections at once (default 256)\n"
        "  --max-body SIZE        largest request body (default 64M)\n"
        "  --max-k N              largest k (default 1000)\n"
        "  --max-queries N        queries per search request (default 1024)\n"
        "  --max-query-vectors N  vectors per query (default 1024)\n"
        "  --max-docs N           documents per add request (default 100000)\n"
        "  --refresh-ms MS        how often an index's MANIFEST is looked at for a new\n"
        "                         generation (default 100; 0: every request)\n"
        "  --encoder CMD          query encoder for {\"texts\": [...]} searches\n"
        "                         (doc/encoder-protocol.md; one process per request)\n"
        "  --encoder-timeout S    seconds without progress before the encoder is killed\n"
        "  --io uring|mmap        residual reads (default: io_uring when available)\n"
        "  --grace S              seconds requests in flight get to finish at SIGTERM (30)\n");
}

/* Splits HOST:PORT ("[::1]:8080" for IPv6) and binds + listens; the fd, or -1 with err. */
static int listen_on(const char *spec, char *shown, size_t shownlen, char *err, size_t errlen) {
    char host[256], port[16];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || !colon[1] || strlen(colon + 1) >= sizeof port ||
        (size_t)(colon - spec) >= sizeof host) {
        snprintf(err, errlen, "--listen must be HOST:PORT (got '%s')", spec);
        return -1;
    }
    size_t hl = (size_t)(colon - spec);
    memcpy(host, spec, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g) {
        snprintf(err, errlen, "--listen %s: %s", spec, gai_strerror(g));
        return -1;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        snprintf(err, errlen, "--listen %s: socket: %s", spec, strerror(errno));
        freeaddrinfo(ai);
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
        int e = errno;
        snprintf(err, errlen, "cannot listen on %s: %s%s", spec, strerror(e),
                 e == EADDRINUSE ? " (another server holds the port; choose another with "
                                   "--listen HOST:PORT)" : "");
        close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN] = "?";
    unsigned p = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
            p = ntohs(a->sin_port);
            snprintf(shown, shownlen, "%s:%u", h, p);
        } else {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
            p = ntohs(a->sin6_port);
            snprintf(shown, shownlen, "[%s]:%u", h, p);
        }
    }
    return fd;
}

static int u32_arg(const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint32_t *out) {
    uint64_t u;
    if (!cli_parse_u64(arg, &u) || u < lo || u > hi)
        return cli_usage_error("serve", "%s must be %llu..%llu (got '%s')", opt,
                               (unsigned long long)lo, (unsigned long long)hi, arg);
    *out = (uint32_t)u;
    return CLI_OK;
}

int cmd_serve(int argc, char **argv) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'},        {"listen", required_argument, 0, 'l'},
        {"threads", required_argument, 0, 't'},      {"queue", required_argument, 0, 'q'},
        {"timeout", required_argument, 0, 'T'},      {"max-connections", required_argument, 0, 'C'},
        {"max-body", required_argument, 0, 'B'},     {"max-k", required_argument, 0, 'k'},
        {"max-queries", required_argument, 0, 'Q'},  {"max-query-vectors", required_argument, 0, 'V'},
        {"max-docs", required_argument, 0, 'D'},     {"refresh-ms", required_argument, 0, 'r'},
        {"encoder", required_argument, 0, 'E'},      {"encoder-timeout", required_argument, 0, 'O'},
        {"io", required_argument, 0, 'I'},           {"grace", required_argument, 0, 'g'},
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
    static srv_state st; /* shared with every connection thread until shutdown */
    memset(&st, 0, sizeof st);
    srv_limits_init(&st.cfg.lim);
    srv_http_options ho = {.threads = 0, .queue = 64, .timeout_s = 30, .max_conns = 256};
    const char *listen_spec = "127.0.0.1:8080";
    uint32_t refresh_ms = 100, grace = 30, u32 = 0;
    tt_open_options oo;
    tt_open_options_init(&oo);
    size_t nidx = 0;
    char **names = calloc((size_t)argc + 1, sizeof *names);
    char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    int c, rc = CLI_USAGE;
    if (!names || !dirs) {
        fprintf(stderr, "tartan serve: out of memory\n");
        free(names);
        free(dirs);
        return CLI_FAIL;
    }
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': {
            const char *eq = strchr(optarg, '=');
            char *name, *dir;
            if (eq) {
                name = strndup(optarg, (size_t)(eq - optarg));
                dir = strdup(eq + 1);
            } else {
                dir = strdup(optarg);
                size_t n = strlen(optarg);
                while (n > 1 && optarg[n - 1] == '/')
                    n--;
                const char *b = optarg + n;
                while (b > optarg && b[-1] != '/')
                    b--;
                name = strndup(b, (size_t)(optarg + n - b));
            }
            /* "idx/" is "idx": an add's spool goes beside the directory as DIR.serve-add-*,
             * never inside it. */
            for (size_t n = dir ? strlen(dir) : 0; n > 1 && dir[n - 1] == '/'; n--)
                dir[n - 1] = '\0';
            names[nidx] = name;
            dirs[nidx] = dir;
            nidx++;
            char tmp[160], nm[129];
            if (!name || !dir || !*dir) {
                rc = cli_usage_error("serve", "--index [NAME=]DIR: bad value '%s'", optarg);
                goto done;
            }
            snprintf(tmp, sizeof tmp, "/indexes/%s", name);
            if (strlen(name) > 120 || srv_route(tmp, nm, sizeof nm) != SRV_EP_INFO) {
                rc = cli_usage_error("serve", "index name '%s': use 1..120 letters, digits, "
                                     "'.', '_' or '-' (--index NAME=DIR)", name);
                goto done;
            }
            break;
        }
        case 'l': listen_spec = optarg; break;
        case 't':
            if ((rc = cli_threads_arg("serve", optarg, &ho.threads)))
                goto done;
            break;
        case 'q': if ((rc = u32_arg("--queue", optarg, 0, 100000, &ho.queue))) goto done; break;
        case 'T': if ((rc = u32_arg("--timeout", optarg, 1, 86400, &ho.timeout_s))) goto done; break;
        case 'C': if ((rc = u32_arg("--max-connections", optarg, 1, 100000, &ho.max_conns))) goto done; break;
        case 'k': if ((rc = u32_arg("--max-k", optarg, 1, 1000000, &st.cfg.lim.max_k))) goto done; break;
        case 'Q': if ((rc = u32_arg("--max-queries", optarg, 1, 1000000, &st.cfg.lim.max_queries))) goto done; break;
        case 'V': if ((rc = u32_arg("--max-query-vectors", optarg, 1, 1000000, &st.cfg.lim.max_query_vectors))) goto done; break;
        case 'D': if ((rc = u32_arg("--max-docs", optarg, 1, 100000000, &st.cfg.lim.max_docs))) goto done; break;
        case 'r': if ((rc = u32_arg("--refresh-ms", optarg, 0, 3600000, &refresh_ms))) goto done; break;
        case 'g': if ((rc = u32_arg("--grace", optarg, 0, 86400, &grace))) goto done; break;
        case 'O':
            if ((rc = u32_arg("--encoder-timeout", optarg, 1, 86400, &u32)))
                goto done;
            st.cfg.encoder_timeout_ms = u32 * 1000;
            break;
        case 'B':
            if (!cli_parse_size(optarg, &st.cfg.lim.max_body) || st.cfg.lim.max_body < 1024) {
                rc = cli_usage_error("serve", "--max-body: bad size '%s' (at least 1K)", optarg);
                goto done;
            }
            break;
        case 'E': st.cfg.encoder = optarg; break;
        case 'I':
            if (!strcmp(optarg, "uring"))
                oo.io = TT_IO_URING;
            else if (!strcmp(optarg, "mmap"))
                oo.io = TT_IO_MMAP;
            else {
                rc = cli_usage_error("serve", "--io must be uring or mmap");
                goto done;
            }
            break;
        case 'h': usage(stdout); rc = CLI_OK; goto done;
        default: usage(stderr); rc = CLI_USAGE; goto done;
        }
    }
    if (optind < argc) {
        rc = cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);
        goto done;
    }
    if (nidx == 0) {
        rc = cli_usage_error("serve", "at least one --index [NAME=]DIR is required");
        goto done;
    }
    rc = CLI_FAIL;
    if (ho.threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        ho.threads = n > 0 ? (int)n : 1;
    }
    st.cfg.change_threads = ho.threads;
    /* Requests run side by side: BLAS threads on top would oversubscribe the cores. */
    tt_blas_set_threads(1);

    /* Every thread inherits the mask: only the sigwait below sees SIGTERM/INT/HUP. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[1024], shown[128] = "";
    st.reg.check_interval = refresh_ms / 1000.0;
    st.reg.metrics = &st.metrics;
    if (srv_registry_open(&st.reg, nidx, names, dirs, &oo, err, sizeof err)) {
        fprintf(stderr, "tartan serve: error: %s\n", err);
        goto done;
    }
    int fd = listen_on(listen_spec, shown, sizeof shown, err, sizeof err);
    if (fd < 0) {
        fprintf(stderr, "tartan serve: error: %s\n", err);
        srv_registry_close(&st.reg);
        goto done;
    }
    srv_http *h = srv_http_start(&st, fd, &ho, err, sizeof err);
    if (!h) {
        fprintf(stderr, "tartan serve: error: %s\n", err);
        srv_registry_close(&st.reg);
        goto done;
    }
    printf("tartan serve: listening on http://%s (", shown);
    for (size_t i = 0; i < st.reg.n; i++)
        printf("%s%s=%s generation %llu", i ? ", " : "", st.reg.ix[i].name, st.reg.ix[i].dir,
               (unsigned long long)st.reg.ix[i].cur->info.generation);
    printf("); %d search threads\n", ho.threads);
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "tartan serve: %s: finishing the requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP");
    srv_http_stop(h, grace);
    srv_registry_close(&st.reg);
    fprintf(stderr, "tartan serve: stopped\n");
    rc = CLI_OK;
done:
    for (size_t i = 0; i < nidx; i++) {
        free(names[i]);
        free(dirs[i]);
    }
    free(names);
    free(dirs);
    return rc;
}
