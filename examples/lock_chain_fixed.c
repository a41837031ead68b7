/*
 * lock_chain_fixed - the twin of lock_chain: nothing slow under the lock.
 *
 * The threads still take one pthread_mutex for every record, but only to
 * give the record its sequence number; each thread appends to a log of its
 * own and calls fsync (or sleeps, with -u USEC) after letting go of the lock.
 * The lock is held for nanoseconds, so almost nobody waits for it; the fsync
 * waits are still there, each thread's own.
 *
 * The summary line carries the program's own clock (see lock_chain.h):
 * held_s is 0 here, the slow calls are counted in free_s.
 */
#include "lock_chain.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long next_record; /* protected by lock */

static void *worker(void *arg)
{
    struct lc_thread *t = arg;
    struct lc_log own_log;
    lc_open_log(&own_log);
    while (!ex_stopped()) {
        lc_lock(t, &lock);
        next_record++;
        pthread_mutex_unlock(&lock);
        t->free_s += lc_durable_append(&own_log).wall_s;
        t->free_calls++;
        t->ops++;
        lc_work_outside(t);
    }
    close(own_log.fd);
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "lock_chain_fixed"};
    lc_options(&o, argc, argv);

    double started = ex_now();
    struct lc_thread *threads = lc_start(&o, worker);
    ex_run_for(&o);
    lc_finish(&o, threads, started);
    return 0;
}
