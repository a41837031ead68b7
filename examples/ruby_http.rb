#!/usr/bin/env ruby
# frozen_string_literal: true

# ruby_http - a small threaded HTTP server on loopback, for scripts/bench runtime-frames.
#
# Ruby's WEBrick (Debian's ruby-webrick), a thread a connection, with
# keep-alive, answering every request with the same small page. Its threads
# take turns on the GVL to run Ruby code, and wait in IO.select for requests.
#
# usage: ruby_http -p PORT

require 'socket'
require 'webrick'

PAGE = "<p>#{'offcpu ' * 128}</p>\n"

def usage
  warn 'usage: ruby_http -p PORT'
  exit 2
end

args = ARGV.dup
usage unless args.length == 2 && args[0] == '-p'
port = Integer(args[1], exception: false)
usage unless port&.between?(1, 65_535)

server = WEBrick::HTTPServer.new(BindAddress: '127.0.0.1', Port: port, Logger: WEBrick::Log.new(File::NULL),
                                 AccessLog: [], DoNotReverseLookup: true)
server.mount_proc('/') do |_request, response|
  response['Content-Type'] = 'text/html'
  response.body = PAGE
end
# Nagle's algorithm off: each reply's body would otherwise wait for the client's delayed ACK (40 ms)
server.listeners.each { |listener| listener.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1) }
%w[INT TERM].each { |signal| trap(signal) { server.shutdown } }
server.start
