#include "model/jinja/text.h"

#include <fmt/format.h>

#include "model/tokenizer/unicode.h"

namespace tessera::model::jinja {

char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    *len = 1;
    return c;
  }
  if (n == 1) {
    *len = 1;
    return c;
  }
  char32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc >> 6) != 0x2) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  *len = n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) { utf8_append(out, static_cast<uint32_t>(cp)); }

bool js_is_space(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 ||
         c == 0xFEFF;
}

size_t js_space_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  size_t len = 1;
  char32_t cp = decode_utf8(s, i, &len);
  return js_is_space(cp) ? len : 0;
}

std::string_view js_trim_start(std::string_view s) {
  size_t i = 0;
  while (size_t n = js_space_len(s, i)) i += n;
  return s.substr(i);
}

std::string_view js_trim_end(std::string_view s) {
  // Walk forward remembering where the last run of whitespace began (UTF-8 cannot be decoded backwards
  // without care, and templates are small).
  size_t i = 0, end = 0;
  while (i < s.size()) {
    size_t n = js_space_len(s, i);
    if (n == 0) {
      size_t len = 1;
      decode_utf8(s, i, &len);
      i += len;
      end = i;
    } else {
      i += n;
    }
  }
  return s.substr(0, end);
}

std::string_view js_trim(std::string_view s) { return js_trim_end(js_trim_start(s)); }

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    char32_t cp = decode_utf8(s, i, &len);
    n += cp > 0xFFFF ? 2 : 1;
    i += len;
  }
  return n;
}

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    decode_utf8(s, i, &len);
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    char32_t cp = decode_utf8(s, i, &len);
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (cp < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
        } else if (ensure_ascii && cp >= 0x7F) {
          if (cp > 0xFFFF) {
            const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
          }
        } else {
          out.append(s.substr(i, len));
        }
    }
    i += len;
  }
  out += '"';
  return out;
}

}  // namespace tessera::model::jinja
