/*
 * deadlock_fixed - deadlock's fixed twin: "left", "right" and "late" take the
 * two mutexes in one order (A, then B), so each gets both in turn, over and
 * over until -s seconds are up; "waiter" waits for work on a condition
 * variable, idle, as in deadlock.
 */
#include "common.h"

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t no_work = PTHREAD_COND_INITIALIZER;

static void *in_order(void *arg)
{
    struct ex_slot *slot = arg;
    while (!ex_stopped()) {
        pthread_mutex_lock(&a);
        pthread_mutex_lock(&b);
        slot->sink = ex_spin(slot->sink + slot->ops, 1000);
        pthread_mutex_unlock(&b);
        pthread_mutex_unlock(&a);
        slot->ops++;
        ex_sleep(0.001);
    }
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

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "deadlock_fixed", .threads = 3, .max_threads = 64,
                        .threads_help = "threads that take both mutexes", .seconds = 5};
    ex_parse(argc, argv, &o);
    pthread_t idle;
    if (pthread_create(&idle, NULL, waiter, NULL)) {
        fprintf(stderr, "deadlock_fixed: pthread_create failed\n");
        return 1;
    }
    pthread_setname_np(idle, "waiter");
    ex_start_timer(&o);
    struct ex_slot *slots = ex_start_workers(&o, NULL, in_order);
    unsigned long long ops = ex_join_workers(&o, slots);
    ex_summary(&o, ops, NULL);
    fflush(stdout);
    exit(0); /* the idle waiter ends with the process */
}
