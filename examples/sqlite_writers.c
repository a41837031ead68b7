/*
 * sqlite_writers - writer threads on one SQLite database file.
 *
 * Each thread has its own connection to one database (WAL journal,
 * synchronous=FULL, so every commit fsyncs the WAL) and runs small write
 * transactions: BEGIN IMMEDIATE, a few INSERTs, COMMIT.  SQLite lets one
 * writer in at a time; the others get SQLITE_BUSY and its busy handler
 * (sqlite3_busy_timeout) retries them after sleeps of 1, 2, 5, 10 ... ms.
 * That is contention which looks like sleeping: the waiters are in
 * nanosleep, woken by a timer, while the one they wait for is in fsync.
 *
 *   hrtimer_nanosleep <- clock_nanosleep <- usleep <- (sqliteDefaultBusyCallback)
 *     <- sqlite3InvokeBusyHandler <- sqlite3BtreeBeginTrans
 *
 * The summary line adds the program's own clock: begin_s, the time spent in
 * BEGIN IMMEDIATE (waiting for the write lock), commit_s in COMMIT (the WAL
 * write and its fsync), and busy, transactions that gave up (none expected).
 *
 * The database lives in the working directory (fsync must reach a disk: run
 * it outside tmpfs) and is removed at the end.
 * Twin: the same program with -t 1 -p 50000 (one writer, a transaction every 50 ms:
 * the load it can take, so that it waits for nobody and mostly for work).
 */
#include "common.h"

#include <sqlite3.h>

#define ROWS_PER_TRANSACTION 4
#define BUSY_TIMEOUT_MS 10000

struct writer {
    _Alignas(EX_CACHELINE) pthread_t tid;
    unsigned long long ops;
    unsigned long long busy;
    double begin_s;
    double commit_s;
};

static char db_path[] = "sqlite_writers.XXXXXX";
static long pause_us; /* -p: sleep this long after each transaction */

static void die(sqlite3 *db, const char *what)
{
    fprintf(stderr, "sqlite_writers: %s: %s\n", what, db ? sqlite3_errmsg(db) : "out of memory");
    exit(1);
}

static sqlite3 *connect(void)
{
    sqlite3 *db;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        die(db, db_path);
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    if (sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) != SQLITE_OK)
        die(db, "PRAGMA synchronous");
    return db;
}

static void create_database(void)
{
    int fd = mkstemp(db_path);
    if (fd < 0) {
        perror("sqlite_writers: database in the working directory");
        exit(1);
    }
    close(fd);
    sqlite3 *db = connect();
    if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE log(writer INTEGER, v BLOB)",
                     NULL, NULL, NULL) != SQLITE_OK)
        die(db, "creating the table");
    sqlite3_close(db);
}

static void remove_database(void)
{
    char path[sizeof db_path + 8];
    unlink(db_path);
    snprintf(path, sizeof path, "%s-wal", db_path);
    unlink(path);
    snprintf(path, sizeof path, "%s-shm", db_path);
    unlink(path);
}

/* Run a statement that returns no rows and add its time to *seconds;
 * false when the write lock stayed busy past the timeout. */
static int timed_step(sqlite3 *db, sqlite3_stmt *stmt, double *seconds)
{
    double start = ex_now();
    int rc = sqlite3_step(stmt);
    *seconds += ex_now() - start;
    sqlite3_reset(stmt);
    if (rc == SQLITE_BUSY)
        return 0;
    if (rc != SQLITE_DONE)
        die(db, sqlite3_sql(stmt));
    return 1;
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *stmt;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK)
        die(db, sql);
    return stmt;
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    sqlite3 *db = connect();
    sqlite3_stmt *begin = prepare(db, "BEGIN IMMEDIATE");
    sqlite3_stmt *insert = prepare(db, "INSERT INTO log VALUES (?, randomblob(100))");
    sqlite3_stmt *commit = prepare(db, "COMMIT");
    double unused = 0;
    sqlite3_bind_int64(insert, 1, (sqlite3_int64)w->tid);
    while (!ex_stopped()) {
        if (!timed_step(db, begin, &w->begin_s)) {
            w->busy++;
            continue;
        }
        for (int i = 0; i < ROWS_PER_TRANSACTION; i++)
            timed_step(db, insert, &unused);
        if (!timed_step(db, commit, &w->commit_s))
            die(db, "COMMIT busy while holding the write lock");
        w->ops++;
        if (pause_us)
            usleep((useconds_t)pause_us);
    }
    sqlite3_finalize(begin);
    sqlite3_finalize(insert);
    sqlite3_finalize(commit);
    sqlite3_close(db);
    return NULL;
}

int main(int argc, char **argv)
{
    struct ex_opts o = {.name = "sqlite_writers", .threads = 4, .max_threads = 256, .seconds = 5,
                        .extra_flag = 'p', .extra_arg = "USEC", .extra_help = "pause after each transaction",
                        .extra = 0, .extra_max = 1000000};
    ex_parse(argc, argv, &o);
    pause_us = o.extra;
    create_database();

    struct writer *writers = aligned_alloc(EX_CACHELINE, (size_t)o.threads * sizeof(*writers));
    if (!writers) {
        perror("aligned_alloc");
        exit(1);
    }
    memset(writers, 0, (size_t)o.threads * sizeof(*writers));
    for (int i = 0; i < o.threads; i++) {
        char name[24]; /* the kernel keeps 15 characters; "writer-255" fits */
        ex_create(&o, &writers[i].tid, writer_main, &writers[i]);
        snprintf(name, sizeof name, "writer-%d", i);
        pthread_setname_np(writers[i].tid, name);
    }
    ex_run_for(&o);

    struct writer sum = {0};
    for (int i = 0; i < o.threads; i++) {
        pthread_join(writers[i].tid, NULL);
        sum.ops += writers[i].ops;
        sum.busy += writers[i].busy;
        sum.begin_s += writers[i].begin_s;
        sum.commit_s += writers[i].commit_s;
    }
    free(writers);
    remove_database();
    ex_summary(&o, sum.ops, " begin_s=%.6f commit_s=%.6f busy=%llu", sum.begin_s, sum.commit_s, sum.busy);
    return 0;
}
