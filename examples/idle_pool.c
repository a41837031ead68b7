/*
 * idle_pool - the control case: a thread pool with (almost) nothing to do.
 *
 * T workers wait on one condition variable; the main thread posts a trivial
 * task only every 200 ms.  The workers are off-CPU nearly 100% of the time,
 * in futex_wait <- pthread_cond_wait -- the very same kernel stack a
 * contended lock produces -- but nobody is waiting for anything scarce: they
 * are idle.  A contention tool must not report this as contention (low
 * wakeup rate, the waits end when work arrives, not when a lock is freed).
 * No fixed twin: there is nothing to fix.
 */
#include "common.h"

#define POST_INTERVAL 0.2 /* seconds between tasks */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static int pending, shutting_down;     /* protected by mu */

static void *worker(void *arg)
{
    struct ex_slot *slot = arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (pending == 0 && !shutting_down)
            pthread_cond_wait(&work, &mu); /* idle, not contended */
        if (pending == 0) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        pending--;
        pthread_mutex_unlock(&mu);

        slot->sink = ex_spin(slot->sink + slot->ops, 100); /* the trivial task */
        slot->ops++;
    }
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "idle_pool", .threads = 16,
                        .max_threads = 1024, .seconds = 5};
    ex_parse(argc, argv, &o);

    struct ex_slot *slots = ex_start_workers(&o, NULL, worker);

    /* Post one task every POST_INTERVAL until the run time is over. */
    double end = ex_now() + o.seconds;
    for (double now = ex_now(); now < end; now = ex_now()) {
        ex_sleep(end - now < POST_INTERVAL ? end - now : POST_INTERVAL);
        pthread_mutex_lock(&mu);
        pending++;
        pthread_cond_signal(&work);
        pthread_mutex_unlock(&mu);
    }
    atomic_store(&ex_stop, 1);

    pthread_mutex_lock(&mu);
    shutting_down = 1;
    pthread_cond_broadcast(&work);
    pthread_mutex_unlock(&mu);

    unsigned long long ops = ex_join_workers(&o, slots);
    ex_summary(&o, ops, NULL);
    return 0;
}
