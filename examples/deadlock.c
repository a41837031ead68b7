/*
 * deadlock - threads that never run again.
 *
 * Two threads take two mutexes in opposite orders ("left" takes A then B,
 * "right" takes B then A), each pausing between its two locks, so that each
 * ends up holding the mutex the other waits for: a deadlock. A third thread
 * ("late") then waits for A behind them, and a fourth ("waiter") waits on a
 * condition variable for work that never comes: it is idle, not stuck.
 * Nothing of them switches while a recording runs, so a tracepoint recording
 * holds nothing of them: their stacks come from the live process.
 *
 * -H: no deadlock; instead "left" takes A and sleeps while holding it, and
 * "right" and "late" wait for A: stuck behind a sleeping holder.
 *
 * The main thread ends the process after -s seconds (exit(), as the threads
 * can never be joined). The fixed twin, deadlock_fixed, takes the mutexes in
 * one order.
 */
#include "common.h"

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t no_work = PTHREAD_COND_INITIALIZER;
static int sleeping_holder; /* -H */

static void hold_both(pthread_mutex_t *first, pthread_mutex_t *second)
{
    pthread_mutex_lock(first);
    ex_sleep(0.05); /* the other thread takes its first mutex meanwhile */
    pthread_mutex_lock(second);
    pthread_mutex_unlock(second);
    pthread_mutex_unlock(first);
}

static void *left(void *arg)
{
    (void)arg;
    if (sleeping_holder) {
        pthread_mutex_lock(&a);
        for (;;)
            ex_sleep(3600); /* holds A and sleeps */
    }
    hold_both(&a, &b);
    return NULL;
}

static void *right(void *arg)
{
    (void)arg;
    if (sleeping_holder) {
        ex_sleep(0.05);
        pthread_mutex_lock(&a);
        pthread_mutex_unlock(&a);
        return NULL;
    }
    hold_both(&b, &a);
    return NULL;
}

static void *late(void *arg)
{
    (void)arg;
    ex_sleep(0.1); /* after the others hold their locks */
    pthread_mutex_lock(&a);
    pthread_mutex_unlock(&a);
    return NULL;
}

static void *waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&idle_mu);
    for (;;)
        pthread_cond_wait(&no_work, &idle_mu); /* no work ever comes */
    return NULL;
}

static void start(pthread_t *thread, void *(*body)(void *), const char *name)
{
    int err = pthread_create(thread, NULL, body, NULL);
    if (err) {
        fprintf(stderr, "deadlock: pthread_create: %s\n", strerror(err));
        exit(1);
    }
    pthread_setname_np(*thread, name);
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "deadlock", .threads = 4, .max_threads = 4,
                        .threads_help = "threads (always 4)", .seconds = 5,
                        .extra_flag = 'H', .extra_arg = "1", .extra_help = "1: a holder that sleeps, no deadlock",
                        .extra = 0, .extra_max = 1};
    ex_parse(argc, argv, &o);
    sleeping_holder = o.extra == 1;
    pthread_t threads[4];
    start(&threads[0], left, "left");
    start(&threads[1], right, "right");
    start(&threads[2], late, "late");
    start(&threads[3], waiter, "waiter");
    ex_sleep(o.seconds);
    ex_summary(&o, 0, NULL);
    fflush(stdout);
    exit(0); /* the stuck threads end with the process */
}
