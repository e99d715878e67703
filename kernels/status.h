// Status and Result<T>: how engines, loaders and the comparator report failure.
//
// A Status carries a code (which maps to the CLI's exit codes) and a message that
// names the file and the place. Context is prepended as an error travels up:
//   RETURN_IF_ERROR(load(path), "loading " + path);
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace splitcheck {

enum class StatusCode {
  kOk = 0,
  kInvalidInput = 2,    // a user's file or scenario is wrong (exit 2)
  kInternal = 3,        // a bug or an environment failure (exit 3)
  kConfigRejected = 4,  // an engine refused its configuration (a verdict, not a crash)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns this status with `context: ` prepended to the message.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_input(std::string message) {
  return Status(StatusCode::kInvalidInput, std::move(message));
}
inline Status config_rejected(std::string message) {
  return Status(StatusCode::kConfigRejected, std::move(message));
}
inline Status internal_error(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {}  // NOLINT

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace splitcheck

#define SPLITCHECK_CONCAT_INNER(a, b) a##b
#define SPLITCHECK_CONCAT(a, b) SPLITCHECK_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr) or RETURN_IF_ERROR(expr, context): returns the failing status.
#define RETURN_IF_ERROR(expr, ...)                                       \
  do {                                                                   \
    ::splitcheck::Status _st = (expr);                                   \
    if (!_st.is_ok()) return _st __VA_OPT__(.with_context(__VA_ARGS__)); \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr) or ASSIGN_OR_RETURN(lhs, expr, context): `lhs = value`, or
// return the failing status (with context prepended when given).
#define ASSIGN_OR_RETURN(lhs, expr, ...)                                                       \
  auto SPLITCHECK_CONCAT(_res_, __LINE__) = (expr);                                            \
  if (!SPLITCHECK_CONCAT(_res_, __LINE__).is_ok())                                             \
    return SPLITCHECK_CONCAT(_res_, __LINE__).status() __VA_OPT__(.with_context(__VA_ARGS__)); \
  lhs = std::move(SPLITCHECK_CONCAT(_res_, __LINE__)).value()
