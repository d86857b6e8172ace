// Keeps the cores for the batch loop: lowers the scheduling priority of the daemon's other
// threads (front end I/O, the OpenAI and operations ports, hop relays, workers, ZeroMQ's own
// threads), so that their short wake-ups for every streamed token do not preempt the compute
// threads in the middle of a decode step.
//
// LowerOtherThreads raises the nice value of every thread of this process by `nice`, except the
// thread named `keep` (sift::BatchEngine names its loop thread "sift-batch"). Threads created
// later inherit the nice value of the thread that creates them: the loop's OpenMP team (created
// by the loop thread) keeps its priority, and a new executor or connection thread gets the
// lower one. Raising a nice value needs no privilege.
//
// Off by default (--io-nice 0): on the 2-core AVX2 AMD EPYC it made a single stream slower
// (23.9 against 36.5 tok/s; docs/operations.md), so it stays an option to measure with.
//
// THREADING: call once, from any thread, after the threads it should reach exist.
// ERRORS:    returns the number of threads changed, or -1 when /proc/self/task is unreadable;
//            threads that could not be changed are skipped.
#ifndef SIFT_DAEMON_THREAD_PRIORITY_H_
#define SIFT_DAEMON_THREAD_PRIORITY_H_

#include <string>

namespace sift::daemon {

int LowerOtherThreads(int nice, const std::string& keep);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_THREAD_PRIORITY_H_
