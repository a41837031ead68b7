import java.util.Locale;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.IntPredicate;

/**
 * java_deadlock - two threads that take two monitors in opposite orders.
 *
 * worker-0 takes LEFT then RIGHT, worker-1 RIGHT then LEFT (even and odd
 * workers, with -t), each sleeping 1 ms (-u MILLIS) between the two so that
 * both soon hold their first and wait for the other's: a Java-level
 * deadlock, which stays until the JVM ends. The program ends after -s SECONDS
 * all the same (System.exit), printing how many turns were made.
 *
 * Fixed twin: java_deadlock_fixed (every worker takes LEFT before RIGHT).
 */
public final class JavaDeadlock {
    static final Object LEFT = new Object();
    static final Object RIGHT = new Object();

    public static void main(String[] args) throws InterruptedException {
        run("java_deadlock", args, index -> index % 2 == 0);
    }

    /** Runs the workers for -s SECONDS, each taking LEFT first when leftFirst says so, then ends the JVM. */
    static void run(String name, String[] args, IntPredicate leftFirst)
            throws InterruptedException {
        Example example = Example.parse(name, 2, 1, args);
        AtomicBoolean stop = new AtomicBoolean();
        long[] ops = new long[example.threads];
        for (int i = 0; i < example.threads; i++) {
            int index = i;
            Object first = leftFirst.test(index) ? LEFT : RIGHT;
            Object second = first == LEFT ? RIGHT : LEFT;
            Thread worker = new Thread(() -> {
                while (!stop.get()) {
                    takeBoth(first, second, example.sleepMillis);
                    ops[index]++;
                }
            }, "worker-" + i);
            worker.setDaemon(true); // deadlocked workers do not keep the JVM from ending
            worker.start();
        }
        Thread.sleep((long) (example.seconds * 1000));
        stop.set(true);
        long total = 0;
        for (long done : ops) {
            total += done;
        }
        System.out.printf(Locale.ROOT, "%s: threads=%d seconds=%.2f ops=%d%n", name, example.threads,
                example.seconds, total);
        System.exit(0);
    }

    static void takeBoth(Object first, Object second, long sleepMillis) {
        synchronized (first) {
            pause(sleepMillis); // holding the first, the other worker takes its own first
            synchronized (second) { // the bug: the other worker holds it and waits for ours
                Thread.onSpinWait();
            }
        }
    }

    static void pause(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
