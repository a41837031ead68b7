// rocksdb_writers - writer threads on one RocksDB database, every write synced.
//
// Each thread Puts small records with WriteOptions::sync, so each write must
// reach the disk before it returns.  RocksDB groups concurrent writes: the
// first writer in the queue becomes the group's leader, appends the whole
// group to the write-ahead log and calls fdatasync; the followers wait for
// it in WriteThread::AwaitState (a spin, some sched_yield, then a condition
// variable) and are woken by the leader once the log is durable.  Adding
// writers adds waiting for the leader's fdatasync, not throughput.
//
// The summary line adds the program's own clock and RocksDB's statistics:
// put_s (time spent in Put), wal_syncs (fdatasyncs of the log), and
// by_leader (writes a leader wrote for a follower).
//
// The database lives in a directory made in the working directory (fdatasync
// must reach a disk: run it outside tmpfs), destroyed at the end.
// Twin: the same program with -t 1 -p 50000 (one writer, a write every 50 ms: the
// load it can take, so that it waits for nobody and mostly for work).
//
// usage: rocksdb_writers [-t THREADS] [-s SECONDS] [-p USEC]
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <pthread.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

constexpr int kMaxThreads = 256;
constexpr size_t kValueBytes = 100;

std::atomic<bool> stop{false};

struct Writer {
    unsigned long long puts = 0;
    double put_s = 0;
};

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: rocksdb_writers [-t THREADS] [-s SECONDS] [-p USEC]\n"
                 "  -t THREADS  number of writer threads, 1..%d (default 4)\n"
                 "  -s SECONDS  run time, >0 and <=3600 (default 5.00)\n"
                 "  -p USEC     pause after each write, 1..1000000 (default none)\n",
                 kMaxThreads);
    std::exit(2);
}

void parse(int argc, char **argv, int &threads, double &seconds, long &pause_us) {
    for (int opt; (opt = getopt(argc, argv, "t:s:p:")) != -1;) {
        char *end = nullptr;
        if (opt == 't') {
            long value = std::strtol(optarg, &end, 10);
            if (*end || end == optarg || value < 1 || value > kMaxThreads) usage();
            threads = static_cast<int>(value);
        } else if (opt == 's') {
            seconds = std::strtod(optarg, &end);
            if (*end || end == optarg || !(seconds > 0) || seconds > 3600) usage();
        } else if (opt == 'p') {
            pause_us = std::strtol(optarg, &end, 10);
            if (*end || end == optarg || pause_us < 1 || pause_us > 1000000) usage();
        } else {
            usage();
        }
    }
    if (optind != argc) usage();
}

[[noreturn]] void fail(const char *what, const rocksdb::Status &status) {
    std::fprintf(stderr, "rocksdb_writers: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
}

void write_until_stopped(rocksdb::DB *db, int id, long pause_us, Writer &writer) {
    rocksdb::WriteOptions synced;
    synced.sync = true;
    const std::string value(kValueBytes, 'v');
    while (!stop.load(std::memory_order_relaxed)) {
        std::string key = "writer" + std::to_string(id) + "-" + std::to_string(writer.puts);
        auto start = std::chrono::steady_clock::now();
        rocksdb::Status status = db->Put(synced, key, value);
        writer.put_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (!status.ok()) fail("Put", status);
        ++writer.puts;
        if (pause_us) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    }
}

}  // namespace

int main(int argc, char **argv) {
    int threads = 4;
    double seconds = 5;
    long pause_us = 0;
    parse(argc, argv, threads, seconds, pause_us);

    char directory[] = "rocksdb_writers.XXXXXX";
    if (!mkdtemp(directory)) {
        std::perror("rocksdb_writers: database in the working directory");
        return 1;
    }
    rocksdb::Options options;
    options.create_if_missing = true;
    options.statistics = rocksdb::CreateDBStatistics();
    rocksdb::DB *db = nullptr;
    rocksdb::Status opened = rocksdb::DB::Open(options, directory, &db);
    if (!opened.ok()) fail(directory, opened);

    std::vector<Writer> writers(threads);
    std::vector<std::thread> running;
    for (int i = 0; i < threads; ++i) {
        running.emplace_back(write_until_stopped, db, i, pause_us, std::ref(writers[i]));
        pthread_setname_np(running.back().native_handle(), ("writer-" + std::to_string(i)).c_str());
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    Writer sum;
    for (int i = 0; i < threads; ++i) {
        running[i].join();
        sum.puts += writers[i].puts;
        sum.put_s += writers[i].put_s;
    }

    unsigned long long syncs = options.statistics->getTickerCount(rocksdb::WAL_FILE_SYNCED);
    unsigned long long by_leader = options.statistics->getTickerCount(rocksdb::WRITE_DONE_BY_OTHER);
    delete db;
    rocksdb::Status destroyed = rocksdb::DestroyDB(directory, options);
    if (!destroyed.ok()) fail("DestroyDB", destroyed);
    rmdir(directory);
    std::printf("rocksdb_writers: threads=%d seconds=%.2f ops=%llu put_s=%.6f wal_syncs=%llu by_leader=%llu\n",
                threads, seconds, sum.puts, sum.put_s, syncs, by_leader);
    return 0;
}
