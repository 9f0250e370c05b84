#include "pool.hpp"

namespace gangsched {

TaskPool::TaskPool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { work(); });
}

TaskPool::~TaskPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void TaskPool::drain() {
    const auto& fn = *fn_;
    for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) fn(i);
}

void TaskPool::work() {
    size_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        drain();
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (--busy_ == 0) idle_.notify_one();
        }
    }
}

void TaskPool::run(size_t n, const std::function<void(size_t)>& fn) {
    if (workers_.empty() || n < 2) {
        for (size_t i = 0; i < n; ++i) fn(i);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        fn_ = &fn;
        n_ = n;
        next_.store(0);
        busy_ = static_cast<int>(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
}

}  // namespace gangsched
