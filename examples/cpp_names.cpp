// cpp_names - threads that wait inside templated C++ code, so that off-CPU
// stacks carry names with spaces, '<>', '::' and commas, as real C++ services do.
// Not a pathology: it exists to check that offcpu keeps such names whole.
//
// usage: cpp_names [-t THREADS] [-s SECONDS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace shop {

template <typename Item>
struct Basket {
    // noinline keeps each level a frame of its own in the stack.
    __attribute__((noinline)) void wait_for_delivery(std::chrono::milliseconds pause) {
        std::this_thread::sleep_for(pause);
    }

    __attribute__((noinline)) long fill(std::chrono::steady_clock::time_point until) {
        long deliveries = 0;
        while (std::chrono::steady_clock::now() < until) {
            wait_for_delivery(std::chrono::milliseconds(2));
            ++deliveries;
        }
        return deliveries;
    }
};

}  // namespace shop

int main(int argc, char **argv) {
    int threads = 4;
    double seconds = 5;
    for (int opt; (opt = getopt(argc, argv, "t:s:")) != -1;) {
        if (opt == 't') threads = std::atoi(optarg);
        else if (opt == 's') seconds = std::atof(optarg);
        else { std::fprintf(stderr, "usage: cpp_names [-t THREADS] [-s SECONDS]\n"); return 2; }
    }
    if (threads < 1 || threads > 256 || !(seconds > 0)) {
        std::fprintf(stderr, "usage: cpp_names [-t THREADS] [-s SECONDS]\n");
        return 2;
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(seconds));
    std::vector<std::thread> workers;
    std::vector<long> done(threads);
    for (int i = 0; i < threads; ++i)
        workers.emplace_back([&, i] { done[i] = shop::Basket<std::pair<int, long>>().fill(until); });
    long total = 0;
    for (int i = 0; i < threads; ++i) {
        workers[i].join();
        total += done[i];
    }
    std::printf("cpp_names: threads=%d seconds=%.2f ops=%ld\n", threads, seconds, total);
    return 0;
}
