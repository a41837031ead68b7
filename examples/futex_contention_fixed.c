/*
 * futex_contention_fixed - twin of futex_contention, done the right way.
 *
 * Same work per operation (the same arithmetic, one counter increment), but
 * each thread owns its state and its counter, each in its own cache line so
 * they don't false-share.  The totals are combined once, after join.  No
 * lock in the hot loop means nothing to sleep on: threads only leave the CPU
 * when the scheduler preempts them.
 */
#include "common.h"

#define WORK_ROUNDS 200

static void *worker(void *arg)
{
    struct ex_slot *slot = arg; /* cache-line aligned, private to this thread */
    unsigned long state = 1;
    while (!ex_stopped()) {
        state = ex_spin(state, WORK_ROUNDS);
        slot->ops++;
    }
    slot->sink = state;
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "futex_contention_fixed", .threads = 8,
                        .max_threads = 1024, .seconds = 5};
    ex_parse(argc, argv, &o);

    struct ex_slot *slots = ex_start_workers(&o, NULL, worker);

    ex_run_for(&o);

    unsigned long long ops = ex_join_workers(&o, slots);
    ex_summary(&o, ops, NULL);
    return 0;
}
