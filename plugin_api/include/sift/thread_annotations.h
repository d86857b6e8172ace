// Clang thread-safety annotations, and a mutex that carries them.
//
// Shared state names the mutex that guards it (SIFT_GUARDED_BY(mu_)); functions that must be
// called with it held say so (SIFT_REQUIRES(mu_)). Clang checks both at compile time with
// -Wthread-safety (the `thread_safety` test compiles the annotated files that way); other
// compilers ignore the annotations. std::mutex carries none in libstdc++, hence sift::Mutex and
// sift::MutexLock. Wait on a condition with std::condition_variable_any on the Mutex itself, in
// a loop over the condition written out under the MutexLock (a predicate lambda would hide the
// guarded reads from the analysis).
//
// THREADING: Mutex is a plain exclusive lock (not recursive). ERRORS: none.
#ifndef SIFT_THREAD_ANNOTATIONS_H_
#define SIFT_THREAD_ANNOTATIONS_H_

#include <mutex>

#if defined(__clang__)
#define SIFT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SIFT_THREAD_ANNOTATION(x)
#endif

#define SIFT_CAPABILITY(x) SIFT_THREAD_ANNOTATION(capability(x))
#define SIFT_SCOPED_CAPABILITY SIFT_THREAD_ANNOTATION(scoped_lockable)
#define SIFT_GUARDED_BY(x) SIFT_THREAD_ANNOTATION(guarded_by(x))
#define SIFT_PT_GUARDED_BY(x) SIFT_THREAD_ANNOTATION(pt_guarded_by(x))
#define SIFT_REQUIRES(...) SIFT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define SIFT_ACQUIRE(...) SIFT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SIFT_RELEASE(...) SIFT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define SIFT_EXCLUDES(...) SIFT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define SIFT_NO_THREAD_SAFETY_ANALYSIS SIFT_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace sift {

class SIFT_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void lock() SIFT_ACQUIRE() { mu_.lock(); }
  void unlock() SIFT_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SIFT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SIFT_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() SIFT_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace sift

#endif  // SIFT_THREAD_ANNOTATIONS_H_
