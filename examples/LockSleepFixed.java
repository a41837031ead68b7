/**
 * java_lock_sleep_fixed - the twin of java_lock_sleep: the same sleep, made
 * before taking the lock, which then guards only the counter it exists for.
 * The workers sleep side by side.
 */
public final class LockSleepFixed {
    public static void main(String[] args) throws InterruptedException {
        Example example = Example.parse("java_lock_sleep_fixed", 4, LockSleep.SLEEP_MS, args);
        long sleepMillis = example.sleepMillis;
        example.run(index -> stop -> {
            long ops = 0;
            while (!stop.get()) {
                LockSleep.pause(sleepMillis);
                LockSleep.LOCK.lock();
                try {
                    ops++;
                } finally {
                    LockSleep.LOCK.unlock();
                }
            }
            return ops;
        });
    }
}
