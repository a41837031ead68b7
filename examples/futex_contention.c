/*
 * futex_contention - one global mutex around the hot path.
 *
 * All threads bump a shared counter under a single pthread_mutex, and do a
 * few hundred nanoseconds of work while holding it (think: a global stats
 * lock, a logger lock, a big lock around a shared cache).  The lock is held
 * almost all the time, so every other thread finds it taken and goes to
 * sleep in the kernel:
 *
 *   futex_wait <- __lll_lock_wait <- pthread_mutex_lock
 *
 * and every unlock has to futex_wake someone.  Adding threads adds waiting,
 * not throughput.
 *
 * Fixed twin: futex_contention_fixed.c (per-thread counters, merged at end).
 */
#include "common.h"

#define WORK_ROUNDS 200 /* ~ a few hundred ns of arithmetic */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long counter;   /* protected by lock */
static unsigned long shared_state = 1; /* protected by lock */

static void *worker(void *arg)
{
    (void)arg;
    while (!ex_stopped()) {
        pthread_mutex_lock(&lock);
        /* The work is done while holding the lock: that is the bug. */
        shared_state = ex_spin(shared_state, WORK_ROUNDS);
        counter++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "futex_contention", .threads = 8,
                        .max_threads = 1024, .seconds = 5};
    ex_parse(argc, argv, &o);

    struct ex_slot *slots = ex_start_workers(&o, NULL, worker);
    ex_run_for(&o);
    ex_join_workers(&o, slots);  /* the work is counted in the shared counter */
    ex_summary(&o, counter, NULL);
    return 0;
}
