/*
 * many_stacks - threads that sleep from thousands of different call paths.
 *
 * Each worker walks the 2^LEVELS paths of a binary tree of calls, one after
 * another: at each level it calls `left` or `right` by one bit of the path,
 * and at the bottom it sleeps a few microseconds.  So every path is a user
 * stack of its own, 4,096 of them by default (-l sets the levels), each
 * taken again every pass.
 *
 * Not a pathology to fix: a test program for offcpu's stack table, which must
 * keep every distinct stack (a table of hash buckets refuses a new stack
 * whose bucket another holds).
 */
#include "common.h"

#include <time.h>

#define SLEEP_NS 20000

static int levels; /* -l */

static void sleep_briefly(void)
{
    struct timespec pause = {.tv_sec = 0, .tv_nsec = SLEEP_NS};
    nanosleep(&pause, NULL);
}

static unsigned long descend(unsigned long path, int level);

/* noinline, and work after the call: each level stays a frame of its own */
__attribute__((noinline)) static unsigned long left(unsigned long path, int level)
{
    return descend(path, level + 1) + 1;
}

__attribute__((noinline)) static unsigned long right(unsigned long path, int level)
{
    return descend(path, level + 1) + 2;
}

__attribute__((noinline)) static unsigned long descend(unsigned long path, int level)
{
    if (level == levels) {
        sleep_briefly();
        return 0;
    }
    return (path >> level) & 1 ? right(path, level) : left(path, level);
}

static void *worker(void *arg)
{
    struct ex_slot *slot = arg;
    while (!ex_stopped()) {
        for (unsigned long path = 0; path < (1UL << levels) && !ex_stopped(); path++) {
            slot->sink += descend(path, 0);
            slot->ops++;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "many_stacks", .threads = 1, .max_threads = 64, .seconds = 5,
                        .extra_flag = 'l', .extra_arg = "LEVELS",
                        .extra_help = "levels of calls: 2^LEVELS distinct stacks",
                        .extra = 12, .extra_max = 20};
    ex_parse(argc, argv, &o);
    levels = (int)o.extra;

    struct ex_slot *slots = ex_alloc_slots(o.threads);
    for (int i = 0; i < o.threads; i++)
        ex_create(&o, &slots[i].tid, worker, &slots[i]);
    ex_run_for(&o);
    ex_summary(&o, ex_join_workers(&o, slots), " stacks=%lu", 1UL << levels);
    return 0;
}
