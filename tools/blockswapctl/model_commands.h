// The commands that change what the daemon holds: `register` (a model from
// safetensors files, read by the daemon), `verify` (re-hash its masters) and
// `evict`.
#ifndef BLOCKSWAP_TOOLS_BLOCKSWAPCTL_MODEL_COMMANDS_H_
#define BLOCKSWAP_TOOLS_BLOCKSWAPCTL_MODEL_COMMANDS_H_

#include <string>

#include "client/core/file_model.h"
#include "tools/blockswapctl/admin_caller.h"

namespace blockswap::ctl {

int Register(const Options& options, const std::string& file,
             const client::FileRegistrationOptions& registration);
// `id_or_prefix`: a whole model id, or a prefix of exactly one registered id.
int Verify(const Options& options, const std::string& id_or_prefix);
int Evict(const Options& options, const std::string& id_or_prefix);

}  // namespace blockswap::ctl

#endif  // BLOCKSWAP_TOOLS_BLOCKSWAPCTL_MODEL_COMMANDS_H_
