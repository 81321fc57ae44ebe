/* How a random line's load costs as the same number of lines spreads over a larger
 * region: the caches hold the same lines in every case, so what grows with the region is
 * the address translation (docs/PERFORMANCE.md, session 71: the LB session table's spread
 * over a VM's pages).
 *
 *   cc -O2 -o /tmp/page_reach scripts/page_reach.c
 *   taskset -c 1 /tmp/page_reach MIB LINES [HUGE]
 *
 * MIB: the region's size; LINES: distinct random 64-byte lines of it, chained in a random
 * cycle and chased (each load's address from the one before); HUGE: 1 (default) asks for
 * transparent huge pages, 0 forbids them. Prints TSC cycles a load. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <x86intrin.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MIB LINES [HUGE]\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)atoi(argv[1]) << 20, align = 2u << 20;
    size_t n = (size_t)atoi(argv[2]), lines = size / 64;
    int huge = argc > 3 ? atoi(argv[3]) : 1;
    if (n < 2 || n > lines) {
        fprintf(stderr, "LINES must be 2 to %zu\n", lines);
        return 2;
    }
    char *raw = mmap(0, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    char *region = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
    madvise(region, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t i = 0; i < size; i += 4096) region[i] = 1;
    /* Distinct lines, in random order (a fixed seed: the same lines every run). */
    size_t *pick = malloc(n * sizeof *pick);
    unsigned char *taken = calloc(lines, 1);
    srand(1);
    for (size_t i = 0; i < n; i++) {
        size_t v;
        do v = (((size_t)rand() << 31) ^ (size_t)rand()) % lines;
        while (taken[v]);
        taken[v] = 1;
        pick[i] = v;
    }
    for (size_t i = 0; i < n; i++) *(char **)(region + pick[i] * 64) = region + pick[(i + 1) % n] * 64;
    char *p = region + pick[0] * 64;
    for (size_t i = 0; i < 3 * n; i++) p = *(char **)p; /* warm */
    size_t loads = 20 * n;
    uint64_t t = __rdtsc();
    for (size_t i = 0; i < loads; i++) p = *(char **)p;
    t = __rdtsc() - t;
    printf("%zu MiB, %zu lines, huge pages %s: %.1f TSC cycles a load (%p)\n", size >> 20, n, huge ? "asked" : "refused",
           (double)t / loads, (void *)p);
    return 0;
}
