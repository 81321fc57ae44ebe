/* The guest's SCTP endpoints for the load balancer's SCTP interop tests
 * (tests/test_lb_sctp_linux.py, tests/test_lb_sctp_dsr_linux.py): the kernel's own SCTP
 * (one-to-one sockets), no libsctp, the few socket options it needs from <linux/sctp.h>
 * by number.
 *
 *   sctp-peer server NETNS ADDR PORT [asconf]
 *       echoes every byte on each association in turn; at the end of one prints
 *       "GUEST: server PORT [ns=NAME ]bytes=B peers=N max=M peer-addrs=A,.. end=E": N the
 *       peer's addresses as the kernel holds them at accept, M the most it held at any
 *       read, NAME the namespace file's name when NETNS is one (which backend it is).
 *   sctp-peer client NETNS VIP PORT BYTES LOCAL[,LOCAL2] [ADD] [port=P] [halfway=CMD]
 *       bound to LOCAL (and LOCAL2: multi-homed, sctp_bindx ADD before connect), from
 *       port P (default: one the kernel picks), sends BYTES to VIP:PORT and reads them
 *       back, checking every byte; with ADD, halfway adds ADD to the connected socket
 *       (sctp_bindx ADD: an ASCONF if the peer listed it); with CMD, halfway runs it
 *       (a shell command, in NETNS: a path failover) and fails unless it exits 0; then a
 *       graceful SHUTDOWN (shutdown(SHUT_WR), read to the end). Prints
 *       "GUEST: client PORT ok bytes=B ..." or "GUEST: client PORT FAIL ...".
 *
 * NETNS: "-" for the current network namespace, else a file (/run/netns/c) entered with
 * setns first. "asconf" (server) or ADD (client): net.sctp.addip_enable and auth_enable
 * set to 1 in that namespace before the socket is made (an endpoint copies them). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SOL_SCTP 132
#define SCTP_SOCKOPT_BINDX_ADD 100
#define SCTP_GET_PEER_ADDRS 108
#define SCTP_GET_LOCAL_ADDRS 109

struct sctp_getaddrs {
    int32_t assoc_id;
    uint32_t addr_num;
    uint8_t addrs[];
};

static void enter(const char *netns) {
    if (strcmp(netns, "-") == 0)
        return;
    int fd = open(netns, O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
        printf("GUEST: setns %s FAIL: %s\n", netns, strerror(errno));
        exit(2);
    }
    close(fd);
}

static void sysctl_one(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "/proc/sys/net/sctp/%s", name);
    int fd = open(path, O_WRONLY);
    if (fd < 0 || write(fd, "1\n", 2) != 2) {
        printf("GUEST: sysctl %s FAIL: %s\n", name, strerror(errno));
        exit(2);
    }
    close(fd);
}

/* An IPv4 or IPv6 address and port: its length. */
static socklen_t addr_of(const char *text, int port, struct sockaddr_storage *a) {
    memset(a, 0, sizeof *a);
    struct sockaddr_in *v4 = (struct sockaddr_in *)a;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)a;
    if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        return sizeof *v4;
    }
    if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        return sizeof *v6;
    }
    printf("GUEST: bad address %s FAIL\n", text);
    exit(2);
}

static int port_of(const struct sockaddr_storage *a) {
    return ntohs(a->ss_family == AF_INET ? ((struct sockaddr_in *)a)->sin_port : ((struct sockaddr_in6 *)a)->sin6_port);
}

/* The addresses the kernel holds for the association's peer (or the socket's own):
 * their count, and their text, comma separated, in `out`. */
static int addrs(int s, int opt, char *out, size_t outlen) {
    union {
        struct sctp_getaddrs g;
        uint8_t raw[4096];
    } u;
    memset(&u, 0, sizeof u);
    socklen_t len = sizeof u;
    out[0] = 0;
    if (getsockopt(s, SOL_SCTP, opt, &u, &len) < 0)
        return -1;
    uint8_t *p = u.g.addrs;
    for (uint32_t i = 0; i < u.g.addr_num; i++) {
        char t[INET6_ADDRSTRLEN] = "?";
        sa_family_t fam;
        memcpy(&fam, p, sizeof fam);
        if (fam == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)p)->sin_addr, t, sizeof t);
            p += sizeof(struct sockaddr_in);
        } else {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)p)->sin6_addr, t, sizeof t);
            p += sizeof(struct sockaddr_in6);
        }
        size_t used = strlen(out);
        snprintf(out + used, outlen - used, "%s%s", i ? "," : "", t);
    }
    return (int)u.g.addr_num;
}

static int server(const char *netns, const char *addr, int port) {
    /* "ns=b1 " for /run/netns/b1: several servers' lines told apart. */
    char label[64] = "";
    if (strcmp(netns, "-") != 0)
        snprintf(label, sizeof label, "ns=%s ", strrchr(netns, '/') ? strrchr(netns, '/') + 1 : netns);
    struct sockaddr_storage at;
    socklen_t alen = addr_of(addr, port, &at);
    int l = socket(at.ss_family, SOCK_STREAM, IPPROTO_SCTP);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l < 0 || bind(l, (struct sockaddr *)&at, alen) < 0 || listen(l, 4) < 0) {
        printf("GUEST: server %d FAIL: %s\n", port, strerror(errno));
        return 2;
    }
    for (;;) {
        int s = accept(l, NULL, NULL);
        if (s < 0)
            continue;
        char list[1024];
        int peers = addrs(s, SCTP_GET_PEER_ADDRS, list, sizeof list), most = peers;
        long total = 0;
        static char buf[65536];
        /* How the association ended for us: "eof" is the peer's SHUTDOWN (an ABORT is
         * ECONNRESET). */
        const char *end = "eof";
        for (;;) {
            ssize_t n = read(s, buf, sizeof buf);
            if (n <= 0) {
                end = n ? strerror(errno) : "eof";
                break;
            }
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(s, buf + off, n - off);
                if (w <= 0) {
                    end = strerror(errno);
                    goto done;
                }
                off += w;
            }
            total += n;
            char now[1024];
            int k = addrs(s, SCTP_GET_PEER_ADDRS, now, sizeof now);
            if (k > most)
                most = k;
        }
    done:
        printf("GUEST: server %d %sbytes=%ld peers=%d max=%d peer-addrs=%s end=%s\n", port, label, total, peers, most, list,
               end);
        fflush(stdout);
        close(s);
    }
}

static unsigned char pattern(long i) { return (unsigned char)(i * 7 + (i >> 9)); }

static int client(const char *vip, int port, long bytes, char *locals, const char *add, int lport, const char *halfway) {
    char *second = strchr(locals, ',');
    if (second)
        *second++ = 0;
    struct sockaddr_storage me, to, extra;
    socklen_t mlen = addr_of(locals, lport, &me), tolen = addr_of(vip, port, &to), elen;
    int s = socket(me.ss_family, SOCK_STREAM, IPPROTO_SCTP);
    int one = 1;
    /* A fixed port again right after an association on it ended. */
    if (s >= 0)
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (s < 0 || bind(s, (struct sockaddr *)&me, mlen) < 0) {
        printf("GUEST: client %d FAIL bind: %s\n", port, strerror(errno));
        return 1;
    }
    getsockname(s, (struct sockaddr *)&me, &mlen);
    if (second) {
        elen = addr_of(second, port_of(&me), &extra);
        if (setsockopt(s, SOL_SCTP, SCTP_SOCKOPT_BINDX_ADD, &extra, elen) < 0) {
            printf("GUEST: client %d FAIL bindx %s: %s\n", port, second, strerror(errno));
            return 1;
        }
    }
    if (connect(s, (struct sockaddr *)&to, tolen) < 0) {
        printf("GUEST: client %d FAIL connect: %s\n", port, strerror(errno));
        return 1;
    }
    static unsigned char out[16384], in[16384];
    long sent = 0, added_at = add ? bytes / 2 : -1, run_at = halfway ? bytes / 2 : -1;
    int add_rc = 0;
    while (sent < bytes) {
        if (sent >= run_at && run_at >= 0) {
            int rc = system(halfway);
            if (rc != 0) {
                printf("GUEST: client %d FAIL halfway command (%d): %s\n", port, rc, halfway);
                return 1;
            }
            run_at = -1;
        }
        if (sent >= added_at && added_at >= 0) {
            elen = addr_of(add, port_of(&me), &extra);
            add_rc = setsockopt(s, SOL_SCTP, SCTP_SOCKOPT_BINDX_ADD, &extra, elen) < 0 ? errno : 0;
            /* Time for an ASCONF to leave and be answered (or retransmitted) while the
             * association carries on. */
            sleep(2);
            added_at = -1;
        }
        long n = bytes - sent < (long)sizeof out ? bytes - sent : (long)sizeof out;
        for (long i = 0; i < n; i++)
            out[i] = pattern(sent + i);
        if (write(s, out, n) != n) {
            printf("GUEST: client %d FAIL write at %ld: %s\n", port, sent, strerror(errno));
            return 1;
        }
        for (long got = 0; got < n;) {
            ssize_t r = read(s, in + got, n - got);
            if (r <= 0) {
                printf("GUEST: client %d FAIL read at %ld: %s\n", port, sent + got, r ? strerror(errno) : "end");
                return 1;
            }
            got += r;
        }
        if (memcmp(in, out, n) != 0) {
            printf("GUEST: client %d FAIL bytes differ in [%ld, %ld)\n", port, sent, sent + n);
            return 1;
        }
        sent += n;
    }
    char local[1024], peer[1024];
    int nlocal = addrs(s, SCTP_GET_LOCAL_ADDRS, local, sizeof local);
    int npeer = addrs(s, SCTP_GET_PEER_ADDRS, peer, sizeof peer);
    /* A graceful SHUTDOWN: ours once the peer has everything, then the peer's end. */
    shutdown(s, SHUT_WR);
    char c;
    ssize_t r = read(s, &c, 1);
    printf("GUEST: client %d ok bytes=%ld local-addrs=%s (%d) peer-addrs=%s (%d) add-rc=%d end=%s\n", port, sent, local, nlocal,
           peer, npeer, add_rc, r == 0 ? "eof" : r < 0 ? strerror(errno) : "data");
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 5 && strcmp(argv[1], "server") == 0) {
        enter(argv[2]);
        if (argc > 5 && strcmp(argv[5], "asconf") == 0) {
            sysctl_one("addip_enable");
            sysctl_one("auth_enable");
        }
        return server(argv[2], argv[3], atoi(argv[4]));
    }
    if (argc >= 7 && strcmp(argv[1], "client") == 0) {
        enter(argv[2]);
        const char *add = NULL, *halfway = NULL;
        int lport = 0;
        for (int i = 7; i < argc; i++) {
            if (strncmp(argv[i], "port=", 5) == 0)
                lport = atoi(argv[i] + 5);
            else if (strncmp(argv[i], "halfway=", 8) == 0)
                halfway = argv[i] + 8;
            else
                add = argv[i];
        }
        if (add) {
            sysctl_one("addip_enable");
            sysctl_one("auth_enable");
        }
        return client(argv[3], atoi(argv[4]), atol(argv[5]), argv[6], add, lport, halfway);
    }
    fprintf(stderr, "usage: sctp-peer server NETNS ADDR PORT [asconf] | client NETNS VIP PORT BYTES LOCAL[,LOCAL2] [ADD] [port=P] [halfway=CMD]\n");
    return 2;
}
