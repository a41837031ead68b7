/*
 * mmap_contention_fixed - twin of mmap_contention, done the right way.
 *
 * Same loop shape and the same per-iteration work (write one byte to each
 * 4 KiB page of a 1 MiB buffer), but each thread maps its buffer once up front
 * and reuses it.  After the first pass every page is resident, so the loop
 * never enters the kernel and never touches mmap_lock: the threads stay
 * on-CPU.  (In real code: keep buffers in a per-thread cache or pool, or let
 * malloc keep them by raising M_MMAP_THRESHOLD / M_TRIM_THRESHOLD.)
 */
#include "common.h"

#include <sys/mman.h>

#define BUF_SIZE (1UL << 20)
#define PAGE 4096UL

static void *worker(void *arg)
{
    struct ex_slot *slot = arg;

    /* Allocate once; this is the only mmap_lock acquisition per thread. */
    char *buf = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("mmap_contention_fixed: mmap");
        exit(1);
    }
    while (!ex_stopped()) {
        for (unsigned long off = 0; off < BUF_SIZE; off += PAGE)
            ((volatile char *)buf)[off] = (char)off;
        slot->ops++;
    }
    munmap(buf, BUF_SIZE);
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "mmap_contention_fixed", .threads = 16,
                        .max_threads = 1024, .seconds = 5};
    ex_parse(argc, argv, &o);

    struct ex_slot *slots = ex_start_workers(&o, NULL, worker);

    ex_run_for(&o);

    unsigned long long ops = ex_join_workers(&o, slots);
    ex_summary(&o, ops, NULL);
    return 0;
}
