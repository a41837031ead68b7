#!/usr/bin/env ruby
# frozen_string_literal: true

# ruby_mutex - Ruby threads that sleep while holding one Thread::Mutex.
#
# Each worker takes the mutex, makes a blocking call holding it (a sleep
# standing for a disk write or a network round trip) and lets it go. The
# others queue on the mutex meanwhile: however many threads there are, one at
# a time makes progress, and each waits most of its time for the mutex while
# the holder waits for the timer. A Ruby thread waiting for a Mutex lets the
# GVL go and sleeps in libruby on a condition variable:
#
#   futex_wait <- pthread_cond_wait <- rb_native_cond_wait <- ... <- do_mutex_lock
#
# (with frame pointers the user stack stops at glibc's futex wrapper; the
# names between are static functions of libruby, which perf cannot name).
#
# Fixed twin: -o, the same sleep made outside the mutex, which then guards
# only the counter it exists for.
#
# usage: ruby_mutex [-t THREADS] [-s SECONDS] [-u SLEEP_US] [-o]

MAX_THREADS = 256

def usage
  warn 'usage: ruby_mutex [-t THREADS] [-s SECONDS] [-u SLEEP_US] [-o]'
  warn "  -t THREADS   worker threads, 1..#{MAX_THREADS} (default 4)"
  warn '  -s SECONDS   run time, >0 and <=3600 (default 5)'
  warn "  -u SLEEP_US  the blocking call's length, µs, 1..1000000 (default 10000)"
  warn '  -o           make the call outside the mutex (fixed)'
  exit 2
end

def parse(args)
  options = { threads: 4, seconds: 5.0, sleep_us: 10_000, outside: false }
  until args.empty?
    flag = args.shift
    if flag == '-o'
      options[:outside] = true
      next
    end
    value = args.shift
    usage if value.nil?
    case flag
    when '-t' then options[:threads] = Integer(value, exception: false)
    when '-s' then options[:seconds] = Float(value, exception: false)
    when '-u' then options[:sleep_us] = Integer(value, exception: false)
    else usage
    end
  end
  usage unless options[:threads]&.between?(1, MAX_THREADS) && options[:seconds]&.positive? &&
               options[:seconds] <= 3600 && options[:sleep_us]&.between?(1, 1_000_000)
  options
end

def work(mutex, counter, options, stop)
  pause = options[:sleep_us] / 1e6
  until Process.clock_gettime(Process::CLOCK_MONOTONIC) >= stop
    if options[:outside]
      sleep pause
      mutex.synchronize { counter[0] += 1 }
    else
      mutex.synchronize do
        sleep pause # the bug: a blocking call holding the mutex
        counter[0] += 1
      end
    end
  end
end

options = parse(ARGV.dup)
mutex = Mutex.new
counter = [0]
stop = Process.clock_gettime(Process::CLOCK_MONOTONIC) + options[:seconds]
workers = Array.new(options[:threads]) do |i|
  Thread.new do
    Thread.current.name = "worker-#{i}"
    work(mutex, counter, options, stop)
  end
end
workers.each(&:join)
puts format('ruby_mutex: threads=%<threads>d seconds=%<seconds>.2f outside=%<outside>d ops=%<ops>d',
            threads: options[:threads], seconds: options[:seconds], outside: options[:outside] ? 1 : 0,
            ops: counter[0])
