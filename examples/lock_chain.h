/*
 * lock_chain.h - shared parts of lock_chain and lock_chain_fixed.
 *
 * Threads append records to a log and make each durable with fsync (or, with
 * -u USEC, sleep instead).  Both programs time with CLOCK_MONOTONIC what a
 * wait-for chain should find, and print it in their summary line:
 *
 *   wall_s       from starting the threads to joining them
 *   lock_wait_s  time threads spent in pthread_mutex_lock when trylock failed,
 *   lock_blocked_s  of which blocked: neither on CPU nor waiting for one (the
 *                thread's CPU clock and its run_delay in /proc/self/task/TID/
 *                schedstat, where the kernel keeps it; else the same as
 *                lock_wait_s),
 *   lock_waits   and how many such calls (one call may sleep on the futex more
 *                than once: woken, it can lose the lock to a thread on CPU)
 *   held_s       time spent in fsync (or sleep) while holding the lock,
 *   held_cpu_s   of which on CPU (the thread's CPU clock: fsync's own work),
 *   held_calls   and how many calls
 *   held_waited_s  the waiters' time spent waiting while a holder was off CPU
 *                in the slow call: for each waiter, the time it waited during
 *                the call's part off CPU, taken as the call's end (fsync's own
 *                work, writing the pages out, comes before its wait for the
 *                disk); so that held_waited_s / lock_blocked_s is the share of
 *                the lock's waits that were waits for the slow call
 *   free_s       the same outside the lock,
 *   free_calls   and how many calls
 *
 * The log lives in the working directory (fsync must reach a disk: run it
 * outside tmpfs), unlinked as soon as it is open so that nothing is left
 * behind.  Records are appended, as a log does, so each fsync also commits the
 * file's new size; the log is cut back to empty every LC_LOG_LIMIT bytes.
 */
#ifndef OFFCPU_EXAMPLES_LOCK_CHAIN_H
#define OFFCPU_EXAMPLES_LOCK_CHAIN_H

#include "common.h"

#include <fcntl.h>
#include <sys/types.h>

#define LC_RECORD 4096
#define LC_LOG_LIMIT (16L << 20)
#define LC_OUTSIDE_ROUNDS 20000 /* some work between records, tens of us */

struct lc_thread {
    _Alignas(EX_CACHELINE) pthread_t tid;
    unsigned long long ops;
    double lock_wait_s;
    double lock_blocked_s;
    int schedstat_fd; /* this thread's /proc/thread-self/schedstat; -1: none, -2: not opened yet */
    unsigned long long lock_waits;
    double held_s;
    double held_cpu_s;
    unsigned long long held_calls;
    double held_waited_s;
    atomic_llong waiting_since_ns; /* in pthread_mutex_lock since (CLOCK_MONOTONIC), or 0 */
    double free_s;
    unsigned long long free_calls;
    unsigned long sink;
};

struct lc_log {
    int fd;
    off_t size;
};

static long lc_sleep_us; /* -u: sleep this long instead of fsync; 0: fsync */
static struct lc_thread *lc_threads; /* all of them, for the holder to see who waits */
static int lc_thread_count;

static inline long long lc_now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000000LL + now.tv_nsec;
}

static inline void lc_options(struct ex_opts *o, int argc, char **argv)
{
    o->threads = 4;
    o->max_threads = 256;
    o->seconds = 5;
    o->extra_flag = 'u';
    o->extra_arg = "USEC";
    o->extra_help = "sleep USEC microseconds instead of fsync (0: fsync)";
    o->extra = 0;
    o->extra_max = 1000000;
    ex_parse(argc, argv, o);
    lc_sleep_us = o->extra;
}

static inline void lc_open_log(struct lc_log *log)
{
    char name[] = "lock_chain.XXXXXX";
    log->fd = mkstemp(name);
    if (log->fd < 0 || unlink(name)) {
        perror("lock_chain: log in the working directory");
        exit(1);
    }
    log->size = 0;
}

/* The calling thread's CPU clock, in seconds. */
static inline double lc_cpu_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* How long the slow call took, and how much of it the thread was on CPU. */
struct lc_call {
    double wall_s;
    double cpu_s;
};

/* Append one record and make it durable, or sleep instead: how long the fsync or
 * the sleep took (the append itself only fills the page cache). */
static inline struct lc_call lc_durable_append(struct lc_log *log)
{
    static const char record[LC_RECORD];
    if (lc_sleep_us) {
        double start = ex_now(), cpu = lc_cpu_now();
        ex_sleep(lc_sleep_us / 1e6);
        return (struct lc_call){ex_now() - start, lc_cpu_now() - cpu};
    }
    if (log->size >= LC_LOG_LIMIT) {
        if (ftruncate(log->fd, 0)) {
            perror("lock_chain: ftruncate");
            exit(1);
        }
        log->size = 0;
    }
    if (pwrite(log->fd, record, LC_RECORD, log->size) != LC_RECORD) {
        perror("lock_chain: pwrite");
        exit(1);
    }
    log->size += LC_RECORD;
    double start = ex_now(), cpu = lc_cpu_now();
    if (fsync(log->fd)) {
        perror("lock_chain: fsync");
        exit(1);
    }
    return (struct lc_call){ex_now() - start, lc_cpu_now() - cpu};
}

/* The calling thread's time waiting for a CPU so far (schedstat's second field, ns), or 0. */
static inline double lc_run_delay(struct lc_thread *t)
{
    if (t->schedstat_fd == -2)
        t->schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    char text[96];
    ssize_t got = t->schedstat_fd < 0 ? -1 : pread(t->schedstat_fd, text, sizeof text - 1, 0);
    if (got <= 0)
        return 0;
    text[got] = 0;
    unsigned long long on_cpu_ns, run_delay_ns;
    return sscanf(text, "%llu %llu", &on_cpu_ns, &run_delay_ns) == 2 ? run_delay_ns / 1e9 : 0;
}

/* pthread_mutex_lock, timed when the lock is taken (a wait in the kernel or a spin). */
static inline void lc_lock(struct lc_thread *t, pthread_mutex_t *lock)
{
    if (pthread_mutex_trylock(lock) == 0)
        return;
    double cpu = lc_cpu_now(), run_delay = lc_run_delay(t);
    long long start = lc_now_ns();
    atomic_store(&t->waiting_since_ns, start);
    pthread_mutex_lock(lock);
    atomic_store(&t->waiting_since_ns, 0);
    double wait_s = (lc_now_ns() - start) / 1e9;
    t->lock_wait_s += wait_s;
    t->lock_blocked_s += wait_s - (lc_cpu_now() - cpu) - (lc_run_delay(t) - run_delay);
    t->lock_waits++;
}

/* The slow call made while holding the lock, counted in held_*. */
static inline void lc_held_call(struct lc_thread *t, struct lc_log *log)
{
    struct lc_call call = lc_durable_append(log);
    long long end = lc_now_ns();
    long long off_cpu_from = end - (long long)((call.wall_s - call.cpu_s) * 1e9);
    /* No waiter leaves while the lock is held: those waiting now waited since they came. */
    for (int i = 0; i < lc_thread_count; i++) {
        long long since = atomic_load(&lc_threads[i].waiting_since_ns);
        if (since)
            t->held_waited_s += (end - (since > off_cpu_from ? since : off_cpu_from)) / 1e9;
    }
    t->held_s += call.wall_s;
    t->held_cpu_s += call.cpu_s;
    t->held_calls++;
}

static inline void lc_work_outside(struct lc_thread *t)
{
    t->sink = ex_spin(t->sink + 1, LC_OUTSIDE_ROUNDS);
}

static inline struct lc_thread *lc_start(const struct ex_opts *o, void *(*worker)(void *))
{
    struct lc_thread *threads = aligned_alloc(EX_CACHELINE, (size_t)o->threads * sizeof(*threads));
    if (!threads) {
        perror("aligned_alloc");
        exit(1);
    }
    memset(threads, 0, (size_t)o->threads * sizeof(*threads));
    for (int i = 0; i < o->threads; i++)
        threads[i].schedstat_fd = -2;
    lc_threads = threads;
    lc_thread_count = o->threads;
    for (int i = 0; i < o->threads; i++) {
        char name[24]; /* the kernel keeps 15 characters; "worker-255" fits */
        ex_create(o, &threads[i].tid, worker, &threads[i]);
        snprintf(name, sizeof name, "worker-%d", i);
        pthread_setname_np(threads[i].tid, name);
    }
    return threads;
}

/* Join the threads and print the summary line with their totals. */
static inline void lc_finish(const struct ex_opts *o, struct lc_thread *threads, double started)
{
    struct lc_thread sum = {0};
    for (int i = 0; i < o->threads; i++) {
        pthread_join(threads[i].tid, NULL);
        sum.ops += threads[i].ops;
        sum.lock_wait_s += threads[i].lock_wait_s;
        sum.lock_blocked_s += threads[i].lock_blocked_s;
        sum.lock_waits += threads[i].lock_waits;
        sum.held_s += threads[i].held_s;
        sum.held_cpu_s += threads[i].held_cpu_s;
        sum.held_calls += threads[i].held_calls;
        sum.held_waited_s += threads[i].held_waited_s;
        sum.free_s += threads[i].free_s;
        sum.free_calls += threads[i].free_calls;
    }
    double wall = ex_now() - started;
    free(threads);
    ex_summary(o, sum.ops,
               " wall_s=%.6f call=%s lock_wait_s=%.6f lock_blocked_s=%.6f lock_waits=%llu held_s=%.6f held_cpu_s=%.6f"
               " held_calls=%llu held_waited_s=%.6f free_s=%.6f free_calls=%llu",
               wall, lc_sleep_us ? "sleep" : "fsync", sum.lock_wait_s, sum.lock_blocked_s, sum.lock_waits,
               sum.held_s, sum.held_cpu_s, sum.held_calls, sum.held_waited_s, sum.free_s, sum.free_calls);
}

#endif
