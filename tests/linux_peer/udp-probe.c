/* The guest's UDP client for the interop tests (busybox's nc has no UDP here): send one
 * datagram to ADDR PORT from a fixed source port, wait up to 3 s for the answer, print
 * it. Exit 0 on a reply. Usage: udp-probe ADDR PORT MESSAGE */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: udp-probe ADDR PORT MESSAGE\n");
        return 2;
    }
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    if (s < 0 || inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) {
        perror("udp-probe");
        return 2;
    }
    struct timeval tv = {.tv_sec = 3};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (sendto(s, argv[3], strlen(argv[3]), 0, (struct sockaddr *)&to, sizeof to) < 0) {
        perror("sendto");
        return 1;
    }
    char buf[2048];
    ssize_t n = recv(s, buf, sizeof buf - 1, 0);
    if (n < 0) {
        printf("udp-probe: no reply\n");
        return 1;
    }
    buf[n] = 0;
    printf("udp-probe: reply %s\n", buf);
    return 0;
}
