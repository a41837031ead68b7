/**
 * java_http - a small HTTP server on loopback, for scripts/bench runtime-frames.
 *
 * The JDK's own server (com.sun.net.httpserver; Debian's JDK 17 has no
 * jwebserver), with a pool of -t worker threads, answers every request with
 * the same small page. Run: java_http -p PORT [-t THREADS].
 */
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;

public final class HttpServe {
    public static void main(String[] args) throws IOException {
        int port = 0;
        int threads = 4;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "-p" -> port = Integer.parseInt(args[i + 1]);
                case "-t" -> threads = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("usage: java_http -p PORT [-t THREADS]");
            }
        }
        // Without it each reply's headers and body go in two writes, the second held back by Nagle's
        // algorithm until the client's delayed ACK (40 ms): a few hundred requests a second
        System.setProperty("sun.net.httpserver.nodelay", "true");
        byte[] page = ("<p>" + "offcpu ".repeat(128) + "</p>\n").getBytes(StandardCharsets.UTF_8);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 256);
        server.createContext("/", exchange -> {
            exchange.getRequestBody().readAllBytes();
            exchange.getResponseHeaders().set("Content-Type", "text/html");
            exchange.sendResponseHeaders(200, page.length);
            try (OutputStream body = exchange.getResponseBody()) {
                body.write(page);
            }
        });
        server.setExecutor(Executors.newFixedThreadPool(threads));
        server.start();
    }
}
