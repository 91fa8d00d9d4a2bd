// A strict little XML well-formedness checker for tests of generated SVG: balanced, properly nested tags,
// quoted attributes, no raw '<' or stray '&' in text or attribute values, one root element. Returns every
// element (name and attributes, in document order) so tests can look for axes and series.
#pragma once

#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::testing {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside, entities left as written
};

struct XmlCheck {
  bool ok = false;
  std::string error;
  std::vector<XmlElement> elements;
};

inline bool xml_entity_ok(const std::string& s, size_t at) {
  for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"}) {
    if (s.compare(at, std::char_traits<char>::length(e), e) == 0) return true;
  }
  return false;
}

inline XmlCheck check_xml(const std::string& s) {
  XmlCheck r;
  auto fail = [&](const std::string& why, size_t at) {
    r.ok = false;
    r.error = why + " at offset " + std::to_string(at);
    return r;
  };
  std::vector<size_t> open;  // indices into r.elements
  size_t i = 0;
  int roots = 0;
  if (s.rfind("<?xml", 0) == 0) {
    i = s.find("?>");
    if (i == std::string::npos) return fail("unterminated XML declaration", 0);
    i += 2;
  }
  while (i < s.size()) {
    if (s[i] != '<') {
      if (s[i] == '&' && !xml_entity_ok(s, i)) return fail("stray '&'", i);
      if (open.empty() && !std::isspace(static_cast<unsigned char>(s[i]))) return fail("text outside the root", i);
      if (!open.empty()) r.elements[open.back()].text += s[i];
      ++i;
      continue;
    }
    size_t end = s.find('>', i);
    if (end == std::string::npos) return fail("unterminated tag", i);
    std::string tag = s.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return fail("'<' inside a tag", i);
    if (!tag.empty() && tag[0] == '/') {
      std::string name = tag.substr(1);
      if (open.empty() || r.elements[open.back()].name != name) return fail("mismatched </" + name + ">", i);
      open.pop_back();
      i = end + 1;
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.pop_back();
    XmlElement e;
    size_t p = 0;
    while (p < tag.size() && !std::isspace(static_cast<unsigned char>(tag[p]))) e.name += tag[p++];
    if (e.name.empty() || !std::isalpha(static_cast<unsigned char>(e.name[0]))) return fail("bad element name", i);
    while (p < tag.size()) {
      while (p < tag.size() && std::isspace(static_cast<unsigned char>(tag[p]))) ++p;
      if (p >= tag.size()) break;
      std::string key;
      while (p < tag.size() && tag[p] != '=' && !std::isspace(static_cast<unsigned char>(tag[p]))) key += tag[p++];
      if (p >= tag.size() || tag[p] != '=' || p + 1 >= tag.size() || tag[p + 1] != '"') {
        return fail("attribute '" + key + "' is not key=\"value\"", i);
      }
      size_t close = tag.find('"', p + 2);
      if (close == std::string::npos) return fail("unterminated attribute value", i);
      std::string value = tag.substr(p + 2, close - p - 2);
      for (size_t k = 0; k < value.size(); ++k) {
        if (value[k] == '&' && !xml_entity_ok(value, k)) return fail("stray '&' in an attribute", i);
      }
      if (e.attrs.count(key)) return fail("duplicate attribute " + key, i);
      e.attrs[key] = value;
      p = close + 1;
    }
    if (open.empty() && ++roots > 1) return fail("more than one root element", i);
    r.elements.push_back(std::move(e));
    if (!self_closing) open.push_back(r.elements.size() - 1);
    i = end + 1;
  }
  if (!open.empty()) return fail("unclosed <" + r.elements[open.back()].name + ">", s.size());
  if (roots != 1) return fail("no root element", 0);
  r.ok = true;
  return r;
}

}  // namespace tessera::testing
