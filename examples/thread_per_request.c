/*
 * thread_per_request - the naive server: one new thread per request.
 *
 * For every incoming request the dispatcher creates a detached thread with
 * the default (8 MiB) stack; the thread "does I/O" (nanosleep 5 ms) and a
 * little work, then exits.  Because requests arrive faster than they finish,
 * threads pile up: thousands of mostly-sleeping threads, each with its own
 * stack mapping, and the dispatcher spends its time in clone/mmap/mprotect
 * and in glibc's stack cache lock instead of serving.  Off-CPU you see a huge
 * number of threads parked in nanosleep (hrtimer_nanosleep), plus the
 * dispatcher blocked on mmap_lock / __lll_lock_wait_private around
 * pthread_create.  Left unbounded, this ends in EAGAIN or an OOM.
 *
 * This demo caps itself so it cannot take the machine down (see below).
 * Fixed twin: thread_per_request_fixed.c (bounded pool + bounded queue).
 */
#include "common.h"

#include <limits.h>
#include <sys/resource.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER;
static long live, peak;                 /* protected by mu */
static atomic_ullong completed, sink;

static void *handle_request(void *arg)
{
    struct timespec io = {0, 5 * 1000 * 1000}; /* simulated 5 ms I/O wait */
    nanosleep(&io, NULL);
    atomic_fetch_xor_explicit(&sink, ex_spin((uintptr_t)arg, 2000), memory_order_relaxed);
    atomic_fetch_add(&completed, 1);

    pthread_mutex_lock(&mu);
    live--;
    pthread_cond_signal(&finished);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static long read_long(const char *path)
{
    long v = -1;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* Half of the tightest system limit on threads, so we never exhaust it. */
static long system_cap(void)
{
    long lim = LONG_MAX, v;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long)rl.rlim_cur < lim)
        lim = (long)rl.rlim_cur;
    if ((v = read_long("/proc/sys/kernel/threads-max")) > 0 && v < lim)
        lim = v;
    if ((v = read_long("/proc/sys/kernel/pid_max")) > 0 && v < lim)
        lim = v;
    /* every thread stack is a mapping (two, with its guard page) */
    if ((v = read_long("/proc/sys/vm/max_map_count")) > 0 && v / 2 < lim)
        lim = v / 2;
    return lim == LONG_MAX ? LONG_MAX : lim / 2;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "thread_per_request", .threads = 2000,
                        .max_threads = 1000000, .seconds = 5,
                        .threads_help = "cap on live request threads", .extra_flag = 'n',
                        .extra_arg = "REQUESTS", .extra_help = "requests to serve",
                        .extra = 100000, .extra_max = 1000000000L};
    ex_parse(argc, argv, &o);

    long sys_cap = system_cap(), cap = o.threads < sys_cap ? o.threads : sys_cap;
    if (cap < 1)
        cap = 1;
    fprintf(stderr, "thread_per_request: effective cap = %ld live threads "
            "(-t %d, half the tightest system limit = %ld)\n", cap, o.threads, sys_cap);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);

    double start = ex_now();
    ex_start_timer(&o);
    long dispatched = 0;
    unsigned long long eagain = 0;
    while (!ex_stopped() && dispatched < o.extra) {
        pthread_mutex_lock(&mu);
        while (live >= cap) /* someone always finishes within ~5 ms */
            pthread_cond_wait(&finished, &mu);
        live++;
        if (live > peak)
            peak = live;
        pthread_mutex_unlock(&mu);

        pthread_t t;
        int err = pthread_create(&t, &attr, handle_request, (void *)(uintptr_t)dispatched);
        if (err) {
            pthread_mutex_lock(&mu);
            live--;
            long now_live = live;
            pthread_mutex_unlock(&mu);
            if (err != EAGAIN) {
                fprintf(stderr, "thread_per_request: pthread_create: %s\n", strerror(err));
                break;
            }
            /* Out of threads/memory: report (rate-limited), back off, retry. */
            eagain++;
            if ((eagain & (eagain - 1)) == 0)
                fprintf(stderr, "thread_per_request: pthread_create: EAGAIN with %ld "
                        "live threads (#%llu), waiting\n", now_live, eagain);
            ex_sleep(0.005);
            continue;
        }
        dispatched++;
    }

    /* Detached threads can't be joined: wait until the last one checks out. */
    pthread_mutex_lock(&mu);
    while (live > 0)
        pthread_cond_wait(&finished, &mu);
    pthread_mutex_unlock(&mu);
    pthread_attr_destroy(&attr);

    ex_summary(&o, atomic_load(&completed),
               " requests=%ld cap=%ld peak_live=%ld eagain=%llu elapsed=%.2f",
               dispatched, cap, peak, eagain, ex_now() - start);
    return 0;
}
