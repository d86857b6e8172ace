// The compute loop that owns the cores: continuous batching of decode, and every other piece of
// model work run between its steps.
//
// One BatchEngine per model and process (siftd makes one). Its thread runs, in turn:
//   - a decode step: the next token of every request handed over with Decode(), computed in one
//     Model::DecodeStep (the rows share the linear layers; each attends to its own cache,
//     whatever its pipeline compressed it to), sampled with each request's own options and seed
//     (sift::Generation), streamed through each request's callback;
//   - a task: work handed over with RunExclusive() (a prefill, filter or select stage), which
//     calls Yield() between bounded slices of it (its layers) to let a decode step run there once
//     BatchEngineOptions::decode_interval has passed since the last one.
// Decode steps and tasks alternate, so a running stream waits about decode_interval plus one
// slice of other work for its next token.
// Tasks are ordered by their size (RunExclusive's `work`: prompt tokens), so that a short prompt
// does not wait for a long prefill: the loop starts the smallest waiting task first (equal sizes:
// in the order they were handed over), and a task at most half the size of the running one
// starts inside that one's Yield() and runs to its end before the longer one goes on (nested on
// the loop thread's stack, at most kMaxNesting deep). A task passed over kMaxBypass times is
// passed over no more: it starts next and is not interrupted, so no task waits forever.
// Prefills of similar size run side by side when they are cut into steps: a task handed over as
// `in_steps` does its work through RunSteps(), one bounded step at a time, and the loop runs the
// steps of every such task in turn, so that requests admitted together (a compressing pipeline's
// prefills, which hold little KV memory each) finish their prefills together and decode in one
// batch. Between two steps a waiting in-steps task starts beside them when it is no larger than
// about what each of them has left (else it waits, so no running one waits long for a late one),
// and among the running ones the loop steps those within 2x of the least work left, the one
// with the most work left first (similar sizes advance together; a much shorter one finishes
// first). The steps run nested on the loop thread's stack like the shorter tasks above, at most
// kMaxInterleaved deep.
// Where BatchEngineOptions::decode_pool chooses (by default on CUDA), a request's KV moves into a
// sift::DecodePool at its first step and back into its cache when it leaves, and each step over
// the pooled rows replays a CUDA graph (docs/engine.md#decode-graphs).
// Requests join the batch between steps and leave when they finish, are cancelled (their callback
// returns false) or fail. All compute runs on the one loop thread, so one OpenMP team serves every
// request.
//
// Greedy output in the batch equals Generate()'s for the same cache and logits, up to the
// product kernel's summation order over several rows (Model::DecodeStep).
//
// OWNERSHIP: the engine borrows the Model (kept alive by the shared_ptr) and, for the duration of
//            a Decode() call, the caller's cache; the caller blocks until its request leaves.
// THREADING: Decode(), RunExclusive() and stats() are safe from any thread but the loop's;
//            Yield() and RunSteps() are for tasks, on the loop thread. Stream callbacks run on the
//            loop thread, one at a time: keep them short, and never call the engine from them.
// ERRORS:    an exception thrown by a decode step fails every request of that step: Decode()
//            rethrows it on each caller's thread; a task's exception is rethrown by RunExclusive,
//            a step's by the RunSteps() of its own task (whichever task's loop ran it).
#ifndef SIFT_BATCH_ENGINE_H_
#define SIFT_BATCH_ENGINE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "sift/decode_pool.h"
#include "sift/generate.h"
#include "sift/model.h"
#include "sift/thread_annotations.h"

namespace sift {

// The shared decode batch as a stage sees it (StageContext::batch_decoder()).
class BatchDecoder {
 public:
  virtual ~BatchDecoder() = default;
  // Generates from a prefilled cache in the host's batch; the same contract as sift::Generate
  // (sift/generate.h) except that `on_piece` runs on the batch's thread. Blocks until the
  // request leaves the batch.
  virtual GenerationResult Decode(const Model& model, KvCache& cache,
                                  const at::Tensor& first_logits, int64_t next_position,
                                  const GenerationOptions& options,
                                  const StreamCallback& on_piece) = 0;
};

struct BatchEngineOptions {
  int64_t max_batch = 64;  // rows per decode step; more requests wait for a free row
  // Inside a task, Yield() runs a decode step only once this long has passed since the last step
  // ended (zero: at every Yield()). Shorter: smoother streams, slower prefills.
  std::chrono::milliseconds decode_interval{200};
  DecodePoolMode decode_pool = DecodePoolMode::kAuto;
};

struct BatchEngineStats {
  int64_t decoding = 0;           // requests in the batch now
  int64_t waiting_rows = 0;       // handed over, waiting for a free row
  int64_t tasks_waiting = 0;      // exclusive tasks not yet started
  int64_t steps = 0;              // decode steps run so far
  int64_t tokens = 0;             // tokens generated so far
  int64_t max_rows = 0;           // the largest step so far
  int64_t tasks_nested = 0;       // tasks started inside a longer task's Yield() so far
  int64_t tasks_interleaved = 0;  // in-steps tasks started beside running steps so far
};

class BatchEngine final : public BatchDecoder {
 public:
  BatchEngine(std::shared_ptr<const Model> model, BatchEngineOptions options = {});
  ~BatchEngine() override;  // finishes the tasks handed over, cancels what still decodes, joins
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Throws sift::Error when `model` is not the engine's model.
  GenerationResult Decode(const Model& model, KvCache& cache, const at::Tensor& first_logits,
                          int64_t next_position, const GenerationOptions& options,
                          const StreamCallback& on_piece) override;

  static constexpr int kMaxNesting = 4;       // tasks running at once, one inside the other (not
                                              // counting the in-steps ones)
  static constexpr int kMaxBypass = 16;       // times a task may be passed over by smaller ones
  static constexpr int kMaxInterleaved = 16;  // in-steps tasks running side by side

  // Runs `task` on the loop thread between decode steps and waits for it; rethrows what it throws.
  // `work`: its size, in prompt tokens, for the order above; <= 0: unknown, then it is ordered
  // after every known size and neither interrupts nor is interrupted. `in_steps`: the task does
  // its work through RunSteps() (it may then start beside other tasks' steps).
  void RunExclusive(const std::function<void()>& task, int64_t work = 0, bool in_steps = false);
  // From inside a task: calls `step` until it returns false (its last step), running between two
  // calls the steps of the other tasks running side by side (see above), decode steps (as
  // Yield()) and tasks that start beside or inside this one; returns when this task's steps are
  // done, rethrowing what one of them threw. `total_steps` (> 0) tells how far along the task
  // is. Each step runs under the LibTorch thread-local state of the RunSteps() call that handed
  // it over. Elsewhere (not on the loop thread, or outside a task) it just calls `step` in turn.
  void RunSteps(const std::function<bool()>& step, int64_t total_steps);
  // From inside a task: runs one decode step now if any request is decoding and the last step
  // ended at least BatchEngineOptions::decode_interval ago; then starts a waiting task at most
  // half this one's size, if any, and returns when it has finished. Returns at once on any other
  // thread.
  void Yield();
  // True on the loop thread (inside a task or a stream callback).
  bool OnLoopThread() const { return std::this_thread::get_id() == thread_id_; }

  BatchEngineStats stats() const;

 private:
  struct Slot;
  struct Task;
  struct Job;
  void Loop() SIFT_EXCLUDES(mu_);
  // One decode step over every slot in the batch (admitting waiting ones first).
  void Step() SIFT_EXCLUDES(mu_);
  void Finish(Slot& slot, std::exception_ptr error) SIFT_EXCLUDES(mu_);
  // True when `slot`'s KV is in pool_ (admitting it on its first step).
  bool InPool(Slot& slot);
  // Per slot of batch_, the token a greedy generation takes (its logits' argmax), computed for
  // every greedy slot together with one host read; -1 for the others (they sample alone).
  std::vector<TokenId> GreedyTokens();
  // Removes and returns the waiting task to start next, of at most `max_work` (its size; unknown
  // sizes only when max_work is INT64_MAX), or nullptr.
  Task* TakeTask(int64_t max_work) SIFT_REQUIRES(mu_);
  // Removes and returns a waiting task of at most half the work of the innermost running one, to
  // run inside it (Yield() and RunSteps()), or nullptr when none may start (kMaxNesting,
  // kMaxBypass). Counts it in tasks_nested.
  Task* TakeShorterTask() SIFT_REQUIRES(mu_);
  void RunTask(Task& task) SIFT_EXCLUDES(mu_);
  // Tasks running that are not in steps (kMaxNesting bounds them; kMaxInterleaved the others).
  int NestedTasks() const;
  // Between two steps of RunSteps(): the running job whose step is next, or nullptr when none.
  Job* NextJob();
  // Runs one step of `job` (its exception ends it and is kept for its own RunSteps()).
  void RunJobStep(Job& job);
  // Removes and returns a waiting in-steps task that may start beside the running steps, or null.
  Task* TakeInterleavedTask() SIFT_REQUIRES(mu_);
  // The work the running steps of `job` have left (its size times the share of steps left).
  static double WorkLeft(const Job& job);

  std::shared_ptr<const Model> model_;
  const BatchEngineOptions options_;
  std::thread::id thread_id_;

  mutable Mutex mu_;
  std::condition_variable_any cv_;       // the loop waits for work
  std::condition_variable_any done_cv_;  // callers wait for their slot or task
  std::deque<Slot*> joining_ SIFT_GUARDED_BY(mu_);
  std::deque<Task*> tasks_ SIFT_GUARDED_BY(mu_);
  bool stopping_ SIFT_GUARDED_BY(mu_) = false;
  bool started_ SIFT_GUARDED_BY(mu_) = false;
  BatchEngineStats stats_ SIFT_GUARDED_BY(mu_);
  std::vector<Slot*> batch_;    // the loop thread only
  std::vector<Task*> running_;  // the loop thread only: the task running and those it interrupted
  std::vector<Job*> jobs_;      // the loop thread only: the RunSteps() calls running, oldest first
  std::chrono::steady_clock::time_point last_step_end_;  // the loop thread only
  // The loop thread only: every step's ids, positions, activations and logits (the slots' logits
  // are views of it, sampled before the next step overwrites them).
  DecodeBuffers buffers_;
  // The batch's KV during decode when the options choose a pool (null otherwise): set by the
  // constructor and never replaced (Decode() reads whether there is one); the pool itself is
  // used by the loop thread only. Requests are admitted at their first step and released when
  // they leave.
  std::unique_ptr<DecodePool> pool_;
  std::thread thread_;  // last: started when everything above exists
};

}  // namespace sift

#endif  // SIFT_BATCH_ENGINE_H_
