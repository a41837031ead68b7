/*
 * common.h - shared helpers for the offcpu example programs.
 *
 * Every example takes `-t THREADS` and `-s SECONDS` (plus at most one extra
 * integer option), runs its workload until a global stop flag is raised, and
 * prints exactly one summary line on stdout:
 *
 *     <name>: threads=<T> seconds=<S> ops=<N> [extra fields]
 *
 * Include this header first: it sets _GNU_SOURCE before any system header.
 */
#ifndef OFFCPU_EXAMPLES_COMMON_H
#define OFFCPU_EXAMPLES_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EX_CACHELINE 64

/* Raised once the run time is over; workers poll it in their hot loop. */
static atomic_int ex_stop;

struct ex_opts {
    const char *name;
    int threads;            /* -t, preset to the program's default */
    int max_threads;        /* upper bound accepted for -t */
    const char *threads_help; /* meaning of -t; NULL = "number of worker threads" */
    double seconds;         /* -s, preset to 5 */
    char extra_flag;        /* optional extra integer option, 0 if none */
    const char *extra_arg;  /* its metavariable, e.g. "MIB" */
    const char *extra_help; /* e.g. "thread stack size in MiB" */
    long extra;             /* its value, preset to the default */
    long extra_max;
};

static inline void ex_usage(const struct ex_opts *o)
{
    fprintf(stderr, "usage: %s [-t THREADS] [-s SECONDS]", o->name);
    if (o->extra_flag)
        fprintf(stderr, " [-%c %s]", o->extra_flag, o->extra_arg);
    fputc('\n', stderr);
    fprintf(stderr, "  -t THREADS  %s, 1..%d (default %d)\n",
            o->threads_help ? o->threads_help : "number of worker threads",
            o->max_threads, o->threads);
    fprintf(stderr, "  -s SECONDS  run time, >0 and <=3600 (default %.2f)\n", o->seconds);
    if (o->extra_flag)
        fprintf(stderr, "  -%c %s  %s, 1..%ld (default %ld)\n", o->extra_flag,
                o->extra_arg, o->extra_help, o->extra_max, o->extra);
    exit(2);
}

static inline int ex_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static inline void ex_parse(int argc, char **argv, struct ex_opts *o)
{
    char optstr[8] = "t:s:";
    if (o->extra_flag) {
        optstr[4] = o->extra_flag;
        optstr[5] = ':';
    }
    const struct ex_opts defaults = *o; /* usage shows defaults, not partial parses */
    int c;
    long v;
    while ((c = getopt(argc, argv, optstr)) != -1) {
        if (c == 't') {
            if (ex_parse_long(optarg, 1, o->max_threads, &v))
                ex_usage(&defaults);
            o->threads = (int)v;
        } else if (c == 's') {
            char *end;
            errno = 0;
            double d = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(d > 0.0) || d > 3600.0)
                ex_usage(&defaults);
            o->seconds = d;
        } else if (o->extra_flag && c == o->extra_flag) {
            if (ex_parse_long(optarg, 1, o->extra_max, &o->extra))
                ex_usage(&defaults);
        } else {
            ex_usage(&defaults);
        }
    }
    if (optind != argc)
        ex_usage(&defaults);
}

static inline double ex_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleep for a (fractional) number of seconds, restarting after signals. */
static inline void ex_sleep(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* The usual driver: let the workers run for o->seconds, then stop them. */
static inline void ex_run_for(const struct ex_opts *o)
{
    ex_sleep(o->seconds);
    atomic_store(&ex_stop, 1);
}

static inline int ex_stopped(void)
{
    return atomic_load_explicit(&ex_stop, memory_order_relaxed);
}

/* For programs whose main thread is busy: raise ex_stop from a timer thread. */
static inline void *ex_timer_main(void *arg)
{
    ex_sleep(*(const double *)arg);
    atomic_store(&ex_stop, 1);
    return NULL;
}

static inline void ex_start_timer(const struct ex_opts *o)
{
    pthread_t t;
    int err = pthread_create(&t, NULL, ex_timer_main, (void *)&o->seconds);
    if (err) {
        fprintf(stderr, "%s: timer thread: %s\n", o->name, strerror(err));
        exit(1);
    }
    pthread_detach(t);
}

/* pthread_create for the long-lived threads of a program: failure is fatal. */
static inline void ex_create(const struct ex_opts *o, pthread_t *t,
                             void *(*fn)(void *), void *arg)
{
    int err = pthread_create(t, NULL, fn, arg);
    if (err) {
        fprintf(stderr, "%s: pthread_create: %s\n", o->name, strerror(err));
        exit(1);
    }
}

/* Print the single summary line; `fmt` adds optional " key=value" fields. */
static inline void ex_summary(const struct ex_opts *o, unsigned long long ops,
                              const char *fmt, ...)
{
    printf("%s: threads=%d seconds=%.2f ops=%llu", o->name, o->threads, o->seconds, ops);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
    }
    putchar('\n');
    fflush(stdout);
}

/* A tiny CPU-only "unit of work" the examples sprinkle around. */
static inline unsigned long ex_spin(unsigned long seed, int rounds)
{
    for (int i = 0; i < rounds; i++)
        seed = seed * 6364136223846793005UL + 1442695040888963407UL;
    return seed;
}

/* Per-thread slot padded to a cache line so counters don't false-share. */
struct ex_slot {
    _Alignas(EX_CACHELINE) pthread_t tid;
    unsigned long long ops;
    unsigned long sink;
};

/* n zeroed, cache-line aligned slots (calloc only guarantees 16 bytes). */
static inline struct ex_slot *ex_alloc_slots(int n)
{
    struct ex_slot *s = aligned_alloc(EX_CACHELINE, (size_t)n * sizeof(*s));
    if (!s) {
        perror("aligned_alloc");
        exit(1);
    }
    memset(s, 0, (size_t)n * sizeof(*s));
    return s;
}

/* Start o->threads workers, each given its own slot; `attr` may be NULL. */
static inline struct ex_slot *ex_start_workers(const struct ex_opts *o, const pthread_attr_t *attr,
                                               void *(*worker)(void *))
{
    struct ex_slot *slots = ex_alloc_slots(o->threads);
    for (int i = 0; i < o->threads; i++) {
        int err = pthread_create(&slots[i].tid, attr, worker, &slots[i]);
        if (err) {
            fprintf(stderr, "%s: pthread_create: %s\n", o->name, strerror(err));
            exit(1);
        }
    }
    return slots;
}

/* Join the workers, free their slots, and add up the ops each counted. */
static inline unsigned long long ex_join_workers(const struct ex_opts *o, struct ex_slot *slots)
{
    unsigned long long ops = 0;
    for (int i = 0; i < o->threads; i++) {
        pthread_join(slots[i].tid, NULL);
        ops += slots[i].ops;
    }
    free(slots);
    return ops;
}

#endif
