#!/usr/bin/env ruby
# frozen_string_literal: true

# ruby_gvl - Ruby threads doing pure-Ruby CPU work: the interpreter lock.
#
# Only the thread that holds Ruby's global VM lock (GVL) runs Ruby code. Each
# worker computes in a loop; the others wait for the lock on a condition
# variable, and the interpreter takes it from the running thread every time
# slice (100 ms) to hand it on. However many threads there are, the process
# uses about one CPU and each thread waits most of its time, woken by the
# sibling that let go.
#
#   futex_wait <- pthread_cond_wait <- rb_native_cond_wait <- ... <- rb_threadptr_execute_interrupts
#
# (a thread told to let go of the lock waits there to get it back; the names
# between are static functions of libruby, which perf cannot name).
#
# Twin: the same program with -t 1 (one thread holds the lock alone).
#
# usage: ruby_gvl [-t THREADS] [-s SECONDS]

MAX_THREADS = 256
ROUNDS = 10_000 # one op: this many steps of a linear congruential generator

def usage
  warn 'usage: ruby_gvl [-t THREADS] [-s SECONDS]'
  warn "  -t THREADS  number of worker threads, 1..#{MAX_THREADS} (default 8)"
  warn '  -s SECONDS  run time, >0 and <=3600 (default 5.00)'
  exit 2
end

def parse(args)
  threads = 8
  seconds = 5.0
  until args.empty?
    flag, value = args.shift(2)
    usage if value.nil?
    case flag
    when '-t' then threads = Integer(value, exception: false)
    when '-s' then seconds = Float(value, exception: false)
    else usage
    end
  end
  usage unless threads&.between?(1, MAX_THREADS) && seconds&.positive? && seconds <= 3600
  [threads, seconds]
end

# Pure Ruby arithmetic on small integers: no allocation, no I/O, no blocking call.
def op(seed)
  ROUNDS.times { seed = (seed * 1_103_515_245 + 12_345) & 0x7fff_ffff }
  seed
end

threads, seconds = parse(ARGV.dup)
stop = false
workers = Array.new(threads) do |i|
  Thread.new do
    Thread.current.name = "worker-#{i}"
    ops = 0
    seed = i
    until stop
      seed = op(seed)
      ops += 1
    end
    ops
  end
end
sleep seconds
stop = true
total = workers.sum(&:value)
puts format('ruby_gvl: threads=%<threads>d seconds=%<seconds>.2f ops=%<ops>d',
            threads: threads, seconds: seconds, ops: total)
