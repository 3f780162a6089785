// Ifunc: loading a container on the source and computing its identity once.
#include <threechains/error.hpp>
#include <threechains/ifunc.hpp>

#include <cstring>
#include <fstream>
#include <iterator>

namespace threechains {

Ifunc Ifunc::from_container(std::vector<std::byte> container) {
  auto state = std::make_shared<State>();
  state->info = inspect_container(container);
  state->id = code_identity(container);
  state->code = std::move(container);
  return Ifunc(std::move(state));
}

Ifunc Ifunc::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(errc::io, "cannot open ifunc container '" + path + "'");
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  try {
    return from_container(std::move(bytes));
  } catch (const Error& e) {
    throw Error(errc::bad_container, path + ": " + e.what());
  }
}

}  // namespace threechains
