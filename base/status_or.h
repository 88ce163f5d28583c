// StatusOr<T>: a value of T, or the failed Status that explains why there is
// none. The result type of an operation that produces something and can
// fail; an operation that only succeeds or fails returns a Status.
//
//   StatusOr<Settings> settings = LoadSettings(path);
//   if (!settings.ok()) return settings.status();
//   Use(*settings);
//
// No exceptions: reading the value of a failed StatusOr is a bug that stops
// the process (std::abort, in every build: it must never read an empty
// value), and building one from an ok Status is a bug that becomes an
// kInternal failure rather than an "ok" without a value.
//
// Thread-safety: a plain value, like Status.
#pragma once

#include <cassert>
#include <cstdlib>
#include <optional>
#include <utility>

#include "base/status.h"

namespace kvpeer {

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // REQUIRES: !status.ok()
  StatusOr(Status status) : status_(Failed(std::move(status))) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}                  // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  // Ok when a value is held.
  const Status& status() const { return status_; }

  // REQUIRES: ok()
  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &value(); }

 private:
  static Status Failed(Status status) {
    assert(!status.ok());
    return status.ok() ? Status::Internal("StatusOr built from an ok Status") : status;
  }
  T& Checked() {
    if (!value_.has_value()) std::abort();
    return *value_;
  }
  const T& Checked() const {
    if (!value_.has_value()) std::abort();
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace kvpeer
