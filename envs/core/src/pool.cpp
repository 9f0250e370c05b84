#include "pool.hpp"

#include <utility>

namespace gangsched {

TaskPool::TaskPool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { work(); });
}

TaskPool::~TaskPool() {
    finish_batch();
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
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
        for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) {
            fn_(i);
            std::lock_guard<std::mutex> lock(mu_);
            done_.push_back(i);
            finished_.notify_all();
        }
        std::lock_guard<std::mutex> lock(mu_);
        --busy_;
        finished_.notify_all();
    }
}

void TaskPool::finish_batch() {  // under no lock: every worker out of the last generation
    std::unique_lock<std::mutex> lock(mu_);
    finished_.wait(lock, [&] { return busy_ == 0; });
}

void TaskPool::start(size_t n, std::function<void(size_t)> fn) {
    finish_batch();
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = std::move(fn);
    n_ = n;
    next_.store(0);
    done_.clear();
    handed_ = 0;
    if (!workers_.empty() && n > 1) {
        busy_ = static_cast<int>(workers_.size());
        ++generation_;
        wake_.notify_all();
    }
}

std::vector<size_t> TaskPool::next() {
    std::vector<size_t> out;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (handed_ == n_) return out;
        if (!done_.empty()) {
            std::swap(out, done_);
            handed_ += out.size();
            return out;
        }
    }
    if (workers_.empty()) {  // no one to overlap with: every task left, in order, on this thread
        for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) {
            fn_(i);
            out.push_back(i);
        }
        std::lock_guard<std::mutex> lock(mu_);
        handed_ += out.size();
        return out;
    }
    const size_t i = next_.fetch_add(1);
    if (i < n_) fn_(i);
    std::unique_lock<std::mutex> lock(mu_);
    if (i < n_) done_.push_back(i);
    finished_.wait(lock, [&] { return !done_.empty(); });
    std::swap(out, done_);
    handed_ += out.size();
    return out;
}

}  // namespace gangsched
