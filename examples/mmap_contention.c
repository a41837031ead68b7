/*
 * mmap_contention - the "allocate a fresh buffer per request" anti-pattern.
 *
 * Every thread repeatedly mmaps a 1 MiB anonymous region, writes one byte per
 * 4 KiB page and munmaps it again.  mmap and munmap take the process-wide
 * mmap_lock for *write*; the first-touch page faults need it (or, on newer
 * kernels, a per-VMA lock that falls back to it) for *read*.  With many
 * threads doing this, they spend their time asleep in the kernel waiting on
 * that one rw-semaphore:
 *
 *   rwsem_down_write_slowpath <- __vm_munmap / vm_mmap_pgoff
 *   rwsem_down_read_slowpath  <- lock_mm_and_find_vma <- do_user_addr_fault
 *
 * Fixed twin: mmap_contention_fixed.c (allocate once, reuse).
 */
#include "common.h"

#include <sys/mman.h>

#define BUF_SIZE (1UL << 20) /* 1 MiB per iteration */
#define PAGE 4096UL

static void *worker(void *arg)
{
    struct ex_slot *slot = arg;

    while (!ex_stopped()) {
        /* A fresh mapping every time: mmap (write lock) ... */
        char *buf = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) {
            perror("mmap_contention: mmap");
            exit(1);
        }
        /* ... 256 page faults (read side) ... */
        for (unsigned long off = 0; off < BUF_SIZE; off += PAGE)
            buf[off] = (char)off;
        /* ... and munmap (write lock again, plus a TLB shootdown). */
        munmap(buf, BUF_SIZE);
        slot->ops++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "mmap_contention", .threads = 16,
                        .max_threads = 1024, .seconds = 5};
    ex_parse(argc, argv, &o);

    struct ex_slot *slots = ex_start_workers(&o, NULL, worker);

    ex_run_for(&o);

    unsigned long long ops = ex_join_workers(&o, slots);
    ex_summary(&o, ops, NULL);
    return 0;
}
