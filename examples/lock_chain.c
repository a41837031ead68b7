/*
 * lock_chain - a lock held across fsync: the waiters wait for the disk.
 *
 * Every thread appends records to one shared log under one pthread_mutex and
 * calls fsync before letting go (think: a commit lock held while the commit
 * record is made durable).  The other threads queue on the mutex:
 *
 *   futex_wait <- __lll_lock_wait <- pthread_mutex_lock
 *
 * but what they really wait for is the holder's fsync, which waits for the
 * disk (D state in jbd2 / blk-mq).  A wait-for chain must go from the waiters
 * to the lock, to its holder, to the fsync.  With -u USEC the holder sleeps
 * instead of calling fsync: the chain then ends in a timer.
 *
 * The summary line carries the program's own clock (see lock_chain.h).
 *
 * Fixed twin: lock_chain_fixed.c (the lock only orders the records; each
 * thread makes its own records durable outside it).
 */
#include "lock_chain.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct lc_log log_file; /* protected by lock */

static void *worker(void *arg)
{
    struct lc_thread *t = arg;
    while (!ex_stopped()) {
        lc_lock(t, &lock);
        /* The durable append is made while holding the lock: that is the bug. */
        lc_held_call(t, &log_file);
        pthread_mutex_unlock(&lock);
        t->ops++;
        lc_work_outside(t);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "lock_chain"};
    lc_options(&o, argc, argv);
    lc_open_log(&log_file);

    double started = ex_now();
    struct lc_thread *threads = lc_start(&o, worker);
    ex_run_for(&o);
    lc_finish(&o, threads, started);
    return 0;
}
