// What happens when a rank of the run is lost: the handler the application installed runs first (the server
// turns /health and new requests to 503 and logs the cause), then the whole run ends with a non-zero status.
// Two detectors call it: the collectives' deadline (a dead or hung rank anywhere, dist/communicator.h), and
// on rank 0 a watch on the processes of the ranks that share its machine (a dead local rank is seen in ~0.1
// s, before the launcher reacts).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace m3::dist {

// Installed once at start-up; runs at most once, on the detecting thread, and should return promptly.
void set_fault_handler(std::function<void(const std::string& why)> handler);
void run_fault_handler(const std::string& why);

struct PeerProcess {
  int rank = 0;
  std::string host;
  int pid = 0;
};

// Polls the listed processes; calls on_lost(why) once when one of them has exited.
class PeerWatch {
 public:
  PeerWatch(std::vector<PeerProcess> peers, std::function<void(const std::string&)> on_lost);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

 private:
  std::vector<PeerProcess> peers_;
  std::function<void(const std::string&)> on_lost_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// True while process `pid` exists and has not exited (a zombie counts as exited).
bool process_alive(int pid);

}  // namespace m3::dist
