import java.util.concurrent.locks.ReentrantLock;

/**
 * java_lock_sleep - threads that sleep holding one java.util.concurrent ReentrantLock.
 *
 * Each worker takes the lock, makes a blocking call holding it (a 10 ms sleep
 * standing for a disk write or a network round trip; -u MILLIS sets it) and
 * lets it go. The others park in the lock's queue meanwhile (LockSupport.park,
 * a condition variable's wait inside HotSpot's Parker): one at a time makes
 * progress, and the holder waits for the timer. The unlock unparks the next.
 * The lock is fair, so that they take turns in order: an unfair one (the
 * default) lets the holder take it again before the worker it woke runs, and
 * one worker can wait the whole run.
 *
 * Fixed twin: java_lock_sleep_fixed (the sleep made before taking the lock).
 */
public final class LockSleep {
    static final long SLEEP_MS = 10;
    static final ReentrantLock LOCK = new ReentrantLock(true);
    private static long shared; // guarded by LOCK

    public static void main(String[] args) throws InterruptedException {
        Example example = Example.parse("java_lock_sleep", 4, SLEEP_MS, args);
        long sleepMillis = example.sleepMillis;
        example.run(index -> stop -> {
            long ops = 0;
            while (!stop.get()) {
                LOCK.lock(); // where the others wait
                try {
                    pause(sleepMillis); // the bug: a blocking call holding the lock
                    shared++;
                } finally {
                    LOCK.unlock();
                }
                ops++;
            }
            return ops;
        });
    }

    static void pause(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
