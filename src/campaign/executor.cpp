// The batched forms of an executor's calls, for an executor that has no batch of its own: one call per job.
#include "campaign/executor.h"

namespace kwb {

std::vector<std::string> Executor::submit_all(const std::vector<JobLaunch>& launches) {
  std::vector<std::string> handles;
  handles.reserve(launches.size());
  for (const JobLaunch& l : launches) handles.push_back(submit(l));
  return handles;
}

std::vector<JobProbe> Executor::probe_all(const std::vector<ActiveJob>& jobs) {
  std::vector<JobProbe> out;
  out.reserve(jobs.size());
  for (const ActiveJob& j : jobs) out.push_back(probe(j.handle, j.launch));
  return out;
}

void Executor::cancel_all(const std::vector<std::string>& handles) {
  for (const std::string& h : handles) cancel(h);
}

std::string Executor::describe_submission(const std::vector<JobLaunch>&) const { return ""; }

}  // namespace kwb
