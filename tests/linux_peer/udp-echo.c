/* The guest's UDP echo server for the load-balancer interop test (busybox's nc has no
 * UDP here): bound to ADDR PORT, so that every answer leaves from that address (a
 * service address on lo, answering the client directly), each datagram sent back to
 * where it came from, for as long as the guest runs. Usage: udp-echo ADDR PORT */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: udp-echo ADDR PORT\n");
        return 2;
    }
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    if (s < 0 || inet_pton(AF_INET, argv[1], &at.sin_addr) != 1 || bind(s, (struct sockaddr *)&at, sizeof at) < 0) {
        perror("udp-echo");
        return 2;
    }
    char buf[65536];
    for (;;) {
        struct sockaddr_in from;
        socklen_t len = sizeof from;
        ssize_t n = recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
        if (n >= 0)
            sendto(s, buf, n, 0, (struct sockaddr *)&from, len);
    }
}
