import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * java_queue - Java workers that wait in a BlockingQueue for work a producer
 * puts now and then.
 *
 * A producer thread puts an item every 50 ms (-u MILLIS); each worker takes
 * one (LinkedBlockingQueue.poll with a timeout, so that it sees the end of the
 * run), works a little and waits for the next. A queue's wait is a park on its
 * condition (LockSupport.park, as a ReentrantLock's is), so its stacks look
 * like a lock's but for the frames: the workers wait for work, not for each
 * other, and nothing here should read as contention. No twin: nothing to fix.
 */
public final class QueueWorkers {
    static final long INTERVAL_MS = 50;

    public static void main(String[] args) throws InterruptedException {
        Example example = Example.parse("java_queue", 4, INTERVAL_MS, args);
        BlockingQueue<Long> queue = new LinkedBlockingQueue<>();
        Thread producer = new Thread(() -> produce(queue, example.sleepMillis), "producer");
        producer.setDaemon(true);
        producer.start();
        example.run(index -> stop -> {
            long ops = 0;
            while (!stop.get()) {
                if (take(queue) != null) {
                    ops++;
                }
            }
            return ops;
        });
    }

    static void produce(BlockingQueue<Long> queue, long intervalMillis) {
        try {
            for (long item = 0; ; item++) {
                Thread.sleep(intervalMillis);
                queue.put(item);
            }
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    static Long take(BlockingQueue<Long> queue) {
        try {
            Long item = queue.poll(100, TimeUnit.MILLISECONDS); // where the workers wait for work
            if (item != null) {
                Example.spin(item, 100_000);
            }
            return item;
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
            return null;
        }
    }
}
