// The fault handler slot and the local peer watch (/proc state of each peer process).
#include "dist/fault.h"

#include <chrono>
#include <fstream>
#include <mutex>

namespace m3::dist {
namespace {
std::mutex g_mutex;
std::function<void(const std::string&)> g_handler;
bool g_ran = false;
}  // namespace

void set_fault_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard lock(g_mutex);
  g_handler = std::move(handler);
}

void run_fault_handler(const std::string& why) {
  std::function<void(const std::string&)> h;
  {
    std::lock_guard lock(g_mutex);
    if (g_ran) return;
    g_ran = true;
    h = g_handler;
  }
  if (h) h(why);
}

bool process_alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

PeerWatch::PeerWatch(std::vector<PeerProcess> peers, std::function<void(const std::string&)> on_lost)
    : peers_(std::move(peers)), on_lost_(std::move(on_lost)) {
  thread_ = std::thread([this] {
    while (!stop_) {
      for (const PeerProcess& p : peers_)
        if (!process_alive(p.pid)) {
          on_lost_("rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) + " on " + p.host +
                   ") exited");
          return;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

PeerWatch::~PeerWatch() {
  stop_ = true;
  thread_.join();
}

}  // namespace m3::dist
