// A child program for the tests that need one of their own (the attacker, its
// target): started with posix_spawn, its stdin and stdout on pipes, read a
// line at a time with a deadline, killed if still running when it goes.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace threechains::test {

class Process {
 public:
  explicit Process(std::vector<std::string> argv) : argv_(std::move(argv)) {
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (std::string& arg : argv_) args.push_back(arg.data());
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
    if (rc != 0) {
      pid_ = -1;
      throw std::runtime_error("cannot start " + argv_[0]);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    kill();
    close(to_child_);
    close(from_child_);
  }

  [[nodiscard]] const std::string& name() const noexcept { return argv_[0]; }

  // The next line of its stdout (without the newline), or nothing if none came
  // in time or it closed its stdout.
  [[nodiscard]] std::optional<std::string> read_line(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (const std::size_t end = buffer_.find('\n'); end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        output_ += line + "\n";
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{from_child_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) != 1) return std::nullopt;
      char chunk[4096];
      const ssize_t n = read(from_child_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  // The next line that starts with `prefix` (earlier lines are kept in output()).
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  [[nodiscard]] std::optional<std::string> read_line_starting(const std::string& prefix,
                                                              std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      std::optional<std::string> line = read_line(std::max(left, std::chrono::milliseconds(0)));
      if (!line) return std::nullopt;
      if (line->rfind(prefix, 0) == 0) return line;
    }
  }

  // Everything it printed until it closed its stdout or `limit` passed.
  std::string read_rest(std::chrono::milliseconds limit) {
    while (read_line(limit)) {
    }
    return output_ + buffer_;
  }

  // What it printed so far, line by line.
  [[nodiscard]] const std::string& output() const noexcept { return output_; }

  void write_line(const std::string& line) {
    const std::string text = line + "\n";
    if (write(to_child_, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      throw std::runtime_error("cannot write to " + argv_[0]);
  }

  // Whether it is still running (reaped once it is not).
  [[nodiscard]] bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      status_ = status;
      return false;
    }
    return true;
  }

  // Waits for it to end; its wait status, or nothing if it outlived `limit`.
  [[nodiscard]] std::optional<int> wait(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      usleep(2000);
    }
    return status_;
  }

  void kill() noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    status_ = status;
    pid_ = -1;
  }

 private:
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  int status_ = 0;
  std::string buffer_;
  std::string output_;
};

}  // namespace threechains::test
