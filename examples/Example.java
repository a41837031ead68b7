import java.util.Locale;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.IntFunction;

/**
 * What every Java example shares with the C ones: -t THREADS and -s SECONDS
 * (and -u MILLIS, the sleep of those that sleep), a usage message and exit status 2 for bad arguments, workers that run until
 * the time is up, and one summary line on stdout.
 */
final class Example {
    static final int MAX_THREADS = 256;

    /** A worker's loop: runs until stopped, returns the ops it did. */
    interface Worker {
        long run(AtomicBoolean stop);
    }

    final String name;
    final int threads;
    final double seconds;
    final long sleepMillis; // -u, for the examples that sleep

    private Example(String name, int threads, double seconds, long sleepMillis) {
        this.name = name;
        this.threads = threads;
        this.seconds = seconds;
        this.sleepMillis = sleepMillis;
    }

    static Example parse(String name, int defaultThreads, String[] args) {
        return parse(name, defaultThreads, -1, args);
    }

    /** With defaultSleepMillis >= 0, -u MILLIS sets the example's sleep too. */
    static Example parse(String name, int defaultThreads, long defaultSleepMillis, String[] args) {
        int threads = defaultThreads;
        double seconds = 5;
        long sleepMillis = defaultSleepMillis;
        if (args.length % 2 != 0) {
            usage(name, defaultThreads, defaultSleepMillis);
        }
        try {
            for (int i = 0; i < args.length; i += 2) {
                switch (args[i]) {
                    case "-t" -> threads = Integer.parseInt(args[i + 1]);
                    case "-s" -> seconds = Double.parseDouble(args[i + 1]);
                    case "-u" -> {
                        if (defaultSleepMillis < 0) {
                            usage(name, defaultThreads, defaultSleepMillis);
                        }
                        sleepMillis = Long.parseLong(args[i + 1]);
                    }
                    default -> usage(name, defaultThreads, defaultSleepMillis);
                }
            }
        } catch (NumberFormatException e) {
            usage(name, defaultThreads, defaultSleepMillis);
        }
        if (threads < 1 || threads > MAX_THREADS || !(seconds > 0) || seconds > 3600
                || (defaultSleepMillis >= 0 && (sleepMillis < 0 || sleepMillis > 10_000))) {
            usage(name, defaultThreads, defaultSleepMillis);
        }
        return new Example(name, threads, seconds, sleepMillis);
    }

    private static void usage(String name, int defaultThreads, long defaultSleepMillis) {
        boolean sleeps = defaultSleepMillis >= 0;
        System.err.printf(Locale.ROOT, "usage: %s [-t THREADS] [-s SECONDS]%s%n"
                + "  -t THREADS  number of worker threads, 1..%d (default %d)%n"
                + "  -s SECONDS  run time, >0 and <=3600 (default 5.00)%n", name, sleeps ? " [-u MILLIS]" : "",
                MAX_THREADS, defaultThreads);
        if (sleeps) {
            System.err.printf(Locale.ROOT, "  -u MILLIS   each sleep, 0..10000 ms (default %d)%n", defaultSleepMillis);
        }
        System.exit(2);
    }

    /** Runs a worker per thread (each made by workerFor from its index) for the
     * given seconds, then prints the summary line with their ops added up. */
    void run(IntFunction<Worker> workerFor) throws InterruptedException {
        AtomicBoolean stop = new AtomicBoolean();
        long[] ops = new long[threads];
        Thread[] running = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            int index = i;
            Worker worker = workerFor.apply(index);
            running[i] = new Thread(() -> ops[index] = worker.run(stop), "worker-" + i);
            running[i].start();
        }
        Thread.sleep((long) (seconds * 1000));
        stop.set(true);
        long total = 0;
        for (int i = 0; i < threads; i++) {
            running[i].join();
            total += ops[i];
        }
        System.out.printf(Locale.ROOT, "%s: threads=%d seconds=%.2f ops=%d%n", name, threads, seconds, total);
    }

    /** Some CPU work: steps of a linear congruential generator. */
    static long spin(long seed, int rounds) {
        for (int i = 0; i < rounds; i++) {
            seed = seed * 6364136223846793005L + 1442695040888963407L;
        }
        return seed;
    }
}
