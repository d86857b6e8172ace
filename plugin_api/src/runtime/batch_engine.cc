#include "sift/batch_engine.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include <ATen/ThreadLocalState.h>

#include "sift/decode_pool.h"
#include "sift/error.h"
#include "sift/host.h"

namespace sift {

// One request in (or waiting for) the batch. Owned by the Decode() call that made it; the loop
// holds a pointer until it marks the slot finished.
struct BatchEngine::Slot {
  Slot(const Model& model, KvCache& cache, const GenerationOptions& options,
       const StreamCallback& on_piece, at::Tensor logits, int64_t next_position)
      : cache(cache),
        options(options),
        on_piece(on_piece),
        logits(std::move(logits)),
        generation(model, this->options, next_position) {}
  KvCache& cache;
  const GenerationOptions options;  // before `generation`, which refers to it
  const StreamCallback& on_piece;
  at::Tensor logits;  // the logits the next token is sampled from ([vocab])
  Generation generation;
  bool fed = false;           // fed to the current step's DecodeStep (the loop thread only)
  bool outside_pool = false;  // its admission to the decode pool failed (the loop thread only)
  GenerationResult result;    // set when finished
  std::exception_ptr error;   // set when a step failed
  bool finished = false;      // guarded by the engine's mu_ (it names no outer lock)
};

struct BatchEngine::Task {
  const std::function<void()>* run = nullptr;
  int64_t work = 0;       // its size (RunExclusive); <= 0: unknown
  bool in_steps = false;  // it works through RunSteps()
  std::exception_ptr error;
  int bypassed = 0;       // times passed over by a smaller task; guarded by the engine's mu_
  bool finished = false;  // guarded by the engine's mu_
};

// One RunSteps() call in progress: its steps may run from any RunSteps() loop on the stack.
struct BatchEngine::Job {
  const std::function<bool()>* step = nullptr;
  at::ThreadLocalState thread_state;  // the caller's LibTorch state, applied around each step
  int64_t work = 0;                   // its task's size
  int64_t total_steps = 1;
  int64_t steps_done = 0;
  bool done = false;
  std::exception_ptr error;
};

BatchEngine::BatchEngine(std::shared_ptr<const Model> model, BatchEngineOptions options)
    : model_(std::move(model)), options_(options) {
  SIFT_CHECK(model_ != nullptr, "BatchEngine: no model");
  SIFT_CHECK(options_.max_batch >= 1, "BatchEngine: max_batch must be >= 1, got ",
             options_.max_batch);
  SIFT_CHECK(options_.decode_interval.count() >= 0, "BatchEngine: decode_interval must be >= 0");
  std::string why;
  if (DecodePool::Wanted(*model_, options_.decode_pool, &why)) {
    pool_ = std::make_unique<DecodePool>(*model_);
    std::fprintf(stderr, "[sift] batch decode: KV in a decode pool, steps as %s\n",
                 pool_->Describe().c_str());
  } else if (model_->options().device.is_cuda()) {  // where graphs were expected: say why not
    std::fprintf(stderr, "[sift] batch decode: each request's own cache, eager steps (%s)\n",
                 why.c_str());
  }
  thread_ = std::thread([this] { Loop(); });
  MutexLock lock(mu_);
  while (!started_) done_cv_.wait(mu_);
}

BatchEngine::~BatchEngine() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

GenerationResult BatchEngine::Decode(const Model& model, KvCache& cache,
                                     const at::Tensor& first_logits, int64_t next_position,
                                     const GenerationOptions& options,
                                     const StreamCallback& on_piece) {
  SIFT_CHECK(&model == model_.get(), "BatchEngine::Decode: another model than the engine's");
  SIFT_CHECK(!OnLoopThread(), "BatchEngine::Decode: called from the loop thread");
  SIFT_CHECK(model.has_tokenizer(), "Generate: the model has no tokenizer");
  // Room for every token this request may append, so steps never reallocate its cache (with a
  // pool its region has that room instead; pool_ never changes after construction).
  if (pool_ == nullptr) {
    for (int64_t l = 0; l < cache.num_layers(); ++l) cache.Reserve(l, options.max_tokens);
  }
  Slot slot(model, cache, options, on_piece, first_logits, next_position);
  {
    MutexLock lock(mu_);
    SIFT_CHECK(!stopping_, "BatchEngine::Decode: the engine is stopping");
    joining_.push_back(&slot);
    ++stats_.waiting_rows;
  }
  cv_.notify_all();
  {
    MutexLock lock(mu_);
    while (!slot.finished) done_cv_.wait(mu_);
  }
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.result);
}

void BatchEngine::RunExclusive(const std::function<void()>& task, int64_t work, bool in_steps) {
  if (OnLoopThread()) {  // already exclusive (a task calling another stage's work)
    task();
    return;
  }
  Task t;
  t.run = &task;
  t.work = work;
  t.in_steps = in_steps && work > 0;
  {
    MutexLock lock(mu_);
    SIFT_CHECK(!stopping_, "BatchEngine::RunExclusive: the engine is stopping");
    tasks_.push_back(&t);
    ++stats_.tasks_waiting;
  }
  cv_.notify_all();
  {
    MutexLock lock(mu_);
    while (!t.finished) done_cv_.wait(mu_);
  }
  if (t.error) std::rethrow_exception(t.error);
}

int BatchEngine::NestedTasks() const {
  return static_cast<int>(
      std::count_if(running_.begin(), running_.end(), [](const Task* t) { return !t->in_steps; }));
}

void BatchEngine::Yield() {
  if (!OnLoopThread()) return;
  if (std::chrono::steady_clock::now() - last_step_end_ >= options_.decode_interval) Step();
  Task* shorter = nullptr;
  {
    MutexLock lock(mu_);
    shorter = TakeShorterTask();
  }
  if (shorter != nullptr) RunTask(*shorter);  // to its end; then the running task goes on
}

BatchEngine::Task* BatchEngine::TakeShorterTask() {
  if (running_.empty() || NestedTasks() >= kMaxNesting) return nullptr;
  Task& current = *running_.back();
  if (current.work <= 0 || current.bypassed >= kMaxBypass) return nullptr;
  Task* shorter = TakeTask(current.work / 2);
  if (shorter != nullptr) {
    ++current.bypassed;
    ++stats_.tasks_nested;
  }
  return shorter;
}

void BatchEngine::RunSteps(const std::function<bool()>& step, int64_t total_steps) {
  if (!OnLoopThread() || running_.empty()) {
    while (step()) {
    }
    return;
  }
  Job job;
  job.step = &step;
  job.work = std::max<int64_t>(1, running_.back()->work);
  job.total_steps = std::max<int64_t>(1, total_steps);
  jobs_.push_back(&job);
  while (!job.done) {
    if (Job* next = NextJob()) RunJobStep(*next);
    if (job.done) break;
    // Between two steps, as Yield(): a decode step when due, then a task that starts inside
    // (much shorter) or beside (an in-steps task of about the work these have left).
    if (std::chrono::steady_clock::now() - last_step_end_ >= options_.decode_interval) Step();
    Task* start = nullptr;
    {
      MutexLock lock(mu_);
      start = TakeInterleavedTask();
      if (start != nullptr) {
        ++stats_.tasks_interleaved;
      } else {
        start = TakeShorterTask();
      }
    }
    if (start != nullptr) RunTask(*start);
  }
  jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));
  if (job.error) std::rethrow_exception(job.error);
}

double BatchEngine::WorkLeft(const Job& job) {
  return static_cast<double>(job.work) * static_cast<double>(job.total_steps - job.steps_done) /
         static_cast<double>(job.total_steps);
}

BatchEngine::Job* BatchEngine::NextJob() {
  double least = 0;
  bool any = false;
  for (const Job* j : jobs_) {
    if (j->done) continue;
    least = any ? std::min(least, WorkLeft(*j)) : WorkLeft(*j);
    any = true;
  }
  Job* next = nullptr;
  for (Job* j : jobs_) {
    if (j->done || WorkLeft(*j) > 2 * least) continue;  // a much shorter one finishes first
    if (next == nullptr || WorkLeft(*j) > WorkLeft(*next)) next = j;  // the laggard goes next
  }
  return next;
}

void BatchEngine::RunJobStep(Job& job) {
  try {
    at::ThreadLocalStateGuard guard(job.thread_state);
    job.done = !(*job.step)();
  } catch (...) {
    job.error = std::current_exception();
    job.done = true;
  }
  ++job.steps_done;
}

BatchEngine::Task* BatchEngine::TakeInterleavedTask() {
  const int side_by_side = static_cast<int>(running_.size()) - NestedTasks();
  if (jobs_.empty() || side_by_side >= kMaxInterleaved) return nullptr;
  double least = -1;
  for (const Job* j : jobs_) {
    if (!j->done) least = least < 0 ? WorkLeft(*j) : std::min(least, WorkLeft(*j));
  }
  if (least <= 0) return nullptr;
  // No larger than about what every running one has left (10 % more: a task that arrived
  // with the others but after their first step), so none of them waits long for it to end.
  for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
    Task* t = *it;
    if (t->in_steps && static_cast<double>(t->work) <= 1.1 * least) {
      tasks_.erase(it);
      --stats_.tasks_waiting;
      return t;
    }
  }
  return nullptr;
}

BatchEngineStats BatchEngine::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

void BatchEngine::Loop() {
  // The name siftd keeps at full priority while it lowers its other threads
  // (daemon/thread_priority.h).
  pthread_setname_np(pthread_self(), "sift-batch");
  {
    MutexLock lock(mu_);
    thread_id_ = std::this_thread::get_id();
    started_ = true;
  }
  done_cv_.notify_all();
  for (;;) {
    Task* task = nullptr;
    {
      MutexLock lock(mu_);
      while (!stopping_ && tasks_.empty() && joining_.empty() && batch_.empty()) cv_.wait(mu_);
      task = TakeTask(INT64_MAX);
      if (task == nullptr && stopping_ && joining_.empty() && batch_.empty()) return;
    }
    if (task != nullptr) RunTask(*task);
    Step();  // tasks and steps alternate
  }
}

BatchEngine::Task* BatchEngine::TakeTask(int64_t max_work) {
  const auto size = [](const Task* t) { return t->work > 0 ? t->work : INT64_MAX; };
  auto chosen = tasks_.end();
  for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
    if ((*it)->bypassed >= kMaxBypass) {  // passed over enough: it goes now, whatever its size
      chosen = it;
      break;
    }
    if (chosen == tasks_.end() || size(*it) < size(*chosen)) chosen = it;
  }
  if (chosen == tasks_.end() || size(*chosen) > max_work) return nullptr;
  for (auto it = tasks_.begin(); it != chosen; ++it) ++(*it)->bypassed;
  Task* task = *chosen;
  tasks_.erase(chosen);
  --stats_.tasks_waiting;
  return task;
}

void BatchEngine::RunTask(Task& task) {
  running_.push_back(&task);
  try {
    (*task.run)();
  } catch (...) {
    task.error = std::current_exception();
  }
  running_.pop_back();
  {
    MutexLock lock(mu_);
    task.finished = true;
  }
  done_cv_.notify_all();
}

void BatchEngine::Step() {
  {
    MutexLock lock(mu_);
    while (!joining_.empty() && static_cast<int64_t>(batch_.size()) < options_.max_batch) {
      batch_.push_back(joining_.front());
      joining_.pop_front();
      --stats_.waiting_rows;
    }
    stats_.decoding = static_cast<int64_t>(batch_.size());
    if (stopping_) {
      for (Slot* slot : batch_) slot->generation.Cancel();
    }
  }
  if (batch_.empty()) return;

  // Sample every slot's next token and stream it; the ones that go on form the step's rows.
  struct Rows {
    std::vector<Slot*> slots;
    std::vector<TokenId> ids;
    std::vector<int64_t> positions;
    std::vector<KvCache*> caches;
  };
  Rows pooled, own;  // the rows whose KV is in the pool, and the others
  int64_t sampled = 0;
  const std::vector<TokenId> chosen = GreedyTokens();
  for (size_t b = 0; b < batch_.size(); ++b) {
    Slot* slot = batch_[b];
    slot->fed = false;
    try {
      Generation& g = slot->generation;
      GenerationStep step = g.done()         ? GenerationStep{}
                            : chosen[b] >= 0 ? g.NextChosen(chosen[b])
                                             : g.Next(slot->logits);
      if (step.token >= 0) ++sampled;
      if (step.emit && slot->on_piece && !slot->on_piece(step.piece, step.token) && !step.cut) {
        g.Cancel();
        step.feed = false;
      }
      if (step.feed) {
        slot->fed = true;
        Rows& to = InPool(*slot) ? pooled : own;
        to.slots.push_back(slot);
        to.ids.push_back(step.token);
        to.positions.push_back(step.position);
        to.caches.push_back(&slot->cache);
      }
    } catch (...) {
      slot->error = std::current_exception();
    }
  }
  std::exception_ptr step_error;
  for (Rows* part : {&pooled, &own}) {
    if (part->slots.empty() || step_error) continue;
    try {
      const at::Tensor logits =
          part == &pooled
              ? pool_->Step(part->ids, part->positions, part->caches)
              : model_->DecodeStep(part->ids, part->positions, part->caches, {}, &buffers_);
      for (size_t i = 0; i < part->slots.size(); ++i) {
        part->slots[i]->logits = logits[static_cast<int64_t>(i)];
      }
    } catch (...) {
      step_error = std::current_exception();
    }
  }
  // Requests that did not go on leave the batch.
  std::vector<Slot*> staying;
  for (Slot* slot : batch_) {
    if (slot->fed && !step_error && !slot->error) {
      staying.push_back(slot);
    } else {
      Finish(*slot, slot->error ? slot->error : (slot->fed ? step_error : nullptr));
    }
  }
  batch_.swap(staying);
  {
    MutexLock lock(mu_);
    ++stats_.steps;
    stats_.tokens += sampled;
    stats_.max_rows = std::max<int64_t>(
        stats_.max_rows, static_cast<int64_t>(pooled.slots.size() + own.slots.size()));
    stats_.decoding = static_cast<int64_t>(batch_.size());
  }
  done_cv_.notify_all();
  last_step_end_ = std::chrono::steady_clock::now();
}

std::vector<TokenId> BatchEngine::GreedyTokens() {
  std::vector<TokenId> chosen(batch_.size(), -1);
  std::vector<at::Tensor> rows;
  std::vector<size_t> which;
  for (size_t b = 0; b < batch_.size(); ++b) {
    const Slot& slot = *batch_[b];
    if (slot.generation.done() || !slot.generation.greedy()) continue;
    rows.push_back(slot.logits.reshape({-1}));
    which.push_back(b);
  }
  if (rows.size() < 2) return chosen;  // one row: its Sampler reads one id as well
  try {
    // Every greedy row's argmax on the device, read in one transfer instead of one per row.
    const std::vector<int64_t> ids = HostInts(at::stack(rows).argmax(1));
    for (size_t i = 0; i < which.size(); ++i) chosen[which[i]] = static_cast<TokenId>(ids[i]);
  } catch (const std::exception&) {
    // Rows that do not stack (logits of different sizes or devices): each samples its own.
  }
  return chosen;
}

bool BatchEngine::InPool(Slot& slot) {
  if (pool_ == nullptr || slot.outside_pool) return false;
  if (pool_->Holds(slot.cache)) return true;
  // Its first step: its KV moves into the pool. One that does not fit (device memory) decodes
  // from its own cache, in the same steps as the others.
  try {
    pool_->Admit(slot.cache, slot.options.max_tokens);
    return true;
  } catch (const std::exception& e) {
    slot.outside_pool = true;
    std::fprintf(stderr, "[sift] batch decode: a request decodes outside the pool: %s\n", e.what());
    return false;
  }
}

void BatchEngine::Finish(Slot& slot, std::exception_ptr error) {
  if (pool_ != nullptr) {  // the decoded entries back into the caller's cache before it returns
    try {
      pool_->Release(slot.cache);
    } catch (...) {
      if (error == nullptr) error = std::current_exception();
    }
  }
  if (error == nullptr) {
    try {
      if (std::optional<std::string> rest = slot.generation.Flush(); rest && slot.on_piece) {
        slot.on_piece(*rest, -1);
      }
      slot.result = slot.generation.TakeResult();
    } catch (...) {
      error = std::current_exception();
    }
  }
  MutexLock lock(mu_);
  slot.error = error;
  slot.finished = true;
}

}  // namespace sift
