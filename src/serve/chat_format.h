// Chat prompt formats for models served by this node: the model families of model/chat_template.h
// (llama-2, llama-3, chatml), plus "plain", which joins the message contents with blank lines and no role
// markers: the honest choice for base models such as stories260K that were never trained on a chat format.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "serve/openai.h"

namespace tessera::serve {

// InvalidArgument naming the known formats when `name` is not one of them.
Result<std::string> format_chat(const std::vector<ChatMessage>& messages, const std::string& name);
std::vector<std::string> chat_format_names();

}  // namespace tessera::serve
