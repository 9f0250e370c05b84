// A fixed pool of threads that runs one indexed task over [0, n) at a time, the caller's thread
// taking part: what the batched envs step their episodes on (envs.gym.vec), the GIL released.
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
    // thread is free; returns when all are done. fn must not throw (catch inside it).
    void run(size_t n, const std::function<void(size_t)>& fn);
    int threads() const { return static_cast<int>(workers_.size()) + 1; }

  private:
    void work();
    void drain();

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_, idle_;
    const std::function<void(size_t)>* fn_ = nullptr;
    size_t n_ = 0;
    std::atomic<size_t> next_{0};
    size_t generation_ = 0;
    int busy_ = 0;  // workers still inside the current generation
    bool stop_ = false;
};

}  // namespace gangsched
