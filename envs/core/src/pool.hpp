// A fixed pool of threads that runs one indexed task over [0, n) at a time: what the batched envs
// step their episodes on (envs.gym.vec), the GIL released. The caller's thread takes part: `start`
// and `next` let it take each finished task's results (its Python work) while the rest run, and
// run a task itself whenever none has finished for it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gangsched {

class TaskPool {
  public:
    // `threads` threads in all, the caller's included (at least 1: then every task runs on the caller's).
    explicit TaskPool(int threads);
    ~TaskPool();
    TaskPool(const TaskPool&) = delete;
    TaskPool& operator=(const TaskPool&) = delete;

    // fn(i) for every i in [0, n), each exactly once, indices handed out in order to whichever
    // thread is free, begun on the pool's threads; the caller then calls `next` until it returns
    // nothing. fn must not throw (catch inside it). A task still running from an earlier `start`
    // is waited for first.
    void start(size_t n, std::function<void(size_t)> fn);
    // The tasks finished since the last call (at least one, in the order they finished), after
    // running one itself when none has finished and one is left to run (every one left, without
    // other threads); empty once every task of the last `start` has been handed out.
    std::vector<size_t> next();
    int threads() const { return static_cast<int>(workers_.size()) + 1; }

  private:
    void work();
    void finish_batch();

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_, finished_;
    std::function<void(size_t)> fn_;
    size_t n_ = 0;
    std::atomic<size_t> next_{0};
    std::vector<size_t> done_;  // finished, not yet handed to the caller
    size_t handed_ = 0;         // finished and handed to the caller
    size_t generation_ = 0;
    int busy_ = 0;  // workers still inside the current generation
    bool stop_ = false;
};

}  // namespace gangsched
