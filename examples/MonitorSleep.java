/**
 * java_monitor_sleep - threads that sleep inside one synchronized block.
 *
 * Each worker enters a monitor, makes a blocking call holding it (a 10 ms
 * sleep standing for a disk write or a network round trip; -u MILLIS sets
 * it) and leaves. The others queue on the monitor meanwhile: one at a time
 * makes progress, each waits most of its time, and the holder waits for the
 * timer. HotSpot lets the
 * next one go through a condition variable (os::PlatformEvent::unpark), and
 * Thread.sleep is a timed park too, so with frame-pointer stacks (glibc has
 * none) every wait is glibc's futex wrapper and nothing more.
 *
 * Fixed twin: java_monitor_sleep_fixed (the sleep made outside the block).
 */
public final class MonitorSleep {
    static final long SLEEP_MS = 10;
    private static long sleepMillis = SLEEP_MS;
    static final Object MONITOR = new Object();
    private static long shared; // guarded by MONITOR

    public static void main(String[] args) throws InterruptedException {
        Example example = Example.parse("java_monitor_sleep", 4, SLEEP_MS, args);
        sleepMillis = example.sleepMillis;
        example.run(index -> stop -> {
            long ops = 0;
            while (!stop.get()) {
                synchronized (MONITOR) {
                    pause(); // the bug: a blocking call holding the monitor
                    shared++;
                }
                ops++;
            }
            return ops;
        });
    }

    static void pause() {
        try {
            Thread.sleep(sleepMillis);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
