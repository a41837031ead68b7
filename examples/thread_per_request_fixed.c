/*
 * thread_per_request_fixed - twin of thread_per_request, done the right way.
 *
 * The same requests (5 ms simulated I/O + a little work) are served by a
 * fixed pool of -t workers (default 32) fed through a bounded queue.  The
 * thread count, the number of stacks and the memory are bounded no matter how
 * fast requests arrive; when the workers can't keep up the dispatcher blocks
 * on the full queue (back-pressure) instead of spawning more threads.
 * Off-CPU time is the honest kind: workers asleep in their I/O, idle workers
 * parked on the queue's condvar, no thread creation in the steady state.
 */
#include "common.h"

#define QCAP 256

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static long queue[QCAP];               /* ring buffer, protected by mu */
static int head, count, closed;
static atomic_ullong completed, sink;

static void handle_request(long id)
{
    struct timespec io = {0, 5 * 1000 * 1000}; /* simulated 5 ms I/O wait */
    nanosleep(&io, NULL);
    atomic_fetch_xor_explicit(&sink, ex_spin((unsigned long)id, 2000), memory_order_relaxed);
    atomic_fetch_add(&completed, 1);
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (count == 0 && !closed)
            pthread_cond_wait(&not_empty, &mu);
        if (count == 0) { /* closed and drained */
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        long id = queue[head];
        head = (head + 1) % QCAP;
        count--;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&mu);

        handle_request(id);
    }
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "thread_per_request_fixed", .threads = 32,
                        .max_threads = 4096, .seconds = 5,
                        .threads_help = "worker pool size", .extra_flag = 'n',
                        .extra_arg = "REQUESTS", .extra_help = "requests to serve",
                        .extra = 100000, .extra_max = 1000000000L};
    ex_parse(argc, argv, &o);

    pthread_t *tids = calloc(o.threads, sizeof(*tids));
    if (!tids)
        return 1;
    for (int i = 0; i < o.threads; i++)
        ex_create(&o, &tids[i], worker, NULL);

    double start = ex_now();
    ex_start_timer(&o);
    long dispatched = 0;
    while (!ex_stopped() && dispatched < o.extra) {
        pthread_mutex_lock(&mu);
        while (count == QCAP) /* back-pressure: wait for a free slot */
            pthread_cond_wait(&not_full, &mu);
        queue[(head + count) % QCAP] = dispatched++;
        count++;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&mu);
    }

    /* Close the queue; workers finish what is queued and exit. */
    pthread_mutex_lock(&mu);
    closed = 1;
    pthread_cond_broadcast(&not_empty);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < o.threads; i++)
        pthread_join(tids[i], NULL);

    ex_summary(&o, atomic_load(&completed), " requests=%ld queue=%d elapsed=%.2f",
               dispatched, QCAP, ex_now() - start);
    free(tids);
    return 0;
}
