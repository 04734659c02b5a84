#include "shared/base/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "shared/base/dtype.h"
#include "shared/base/json_error.h"
#include "shared/base/message_text.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

using Json = nlohmann::json;

constexpr absl::string_view kMetadataKey = "__metadata__";
// Dimensions of one tensor; the model layout allows no more either.
constexpr size_t kMaxRank = 64;

absl::Status WithinHeaderLimit(uint64_t length) {
  if (length > kSafetensorsMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header length ", length, " exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Unsigned(const Json& value, absl::string_view what) {
  if (!value.is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", value.type_name(), " ", Quoted(value.dump()),
                     ", not an unsigned integer"));
  }
  return value.get<uint64_t>();
}

// The checks of a tensor whose entry has the right form: its name, its dtype
// and its bytes in the data section.
absl::Status CheckTensor(const SafetensorsTensor& tensor, uint64_t data_bytes) {
  const std::string label = absl::StrCat("tensor ", Quoted(tensor.name));
  if (tensor.name.empty()) return absl::InvalidArgumentError("a tensor has an empty name");
  if (tensor.name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("name of ", label, " contains a NUL byte"));
  }
  if (auto bits = DtypeBits(tensor.dtype); !bits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", bits.status().message()));
  }
  if (tensor.begin > tensor.end) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": data_offsets [", tensor.begin, ", ",
                                                   tensor.end, "] end before they begin"));
  }
  if (tensor.end > data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": data_offsets [", tensor.begin, ", ",
                                                   tensor.end, "] reach past the data section of ",
                                                   data_bytes, " bytes"));
  }
  auto expected = TensorBytes(tensor.dtype, tensor.shape);
  if (!expected.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", expected.status().message()));
  }
  if (*expected != tensor.end - tensor.begin) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": ", tensor.dtype, " ", FormatShape(tensor.shape), " is ", *expected,
                     " bytes but data_offsets [", tensor.begin, ", ", tensor.end, "] hold ",
                     tensor.end - tensor.begin));
  }
  return absl::OkStatus();
}

// The tensor of any entry, as a JSON value: says what is wrong with its form
// (the JSON types of its fields), then CheckTensor.
absl::StatusOr<SafetensorsTensor> ParseTensor(const std::string& name, const Json& entry,
                                              uint64_t data_bytes) {
  const std::string label = absl::StrCat("tensor ", Quoted(name));
  if (!entry.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " is ", entry.type_name(), ", not an object"));
  }
  SafetensorsTensor tensor;
  tensor.name = name;
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return absl::InvalidArgumentError(
          absl::StrCat(label, " has an unknown field ", Quoted(key),
                       " (expected dtype, shape and data_offsets)"));
    }
  }
  auto dtype = entry.find("dtype");
  auto shape = entry.find("shape");
  auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || shape == entry.end() || offsets == entry.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " lacks ",
                     dtype == entry.end()   ? "dtype"
                     : shape == entry.end() ? "shape"
                                            : "data_offsets"));
  }
  if (!dtype->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": dtype is ", dtype->type_name(), ", not a string"));
  }
  tensor.dtype = dtype->get<std::string>();
  if (!shape->is_array() || shape->size() > kMaxRank) {
    return absl::InvalidArgumentError(
        shape->is_array() ? absl::StrCat(label, " has ", shape->size(), " dimensions (limit ",
                                         kMaxRank, ")")
                          : absl::StrCat(label, ": shape is ", shape->type_name(),
                                         ", not an array"));
  }
  for (size_t d = 0; d < shape->size(); ++d) {
    BLOCKSWAP_ASSIGN_OR_RETURN(
        uint64_t dim, Unsigned((*shape)[d], absl::StrCat(label, ": dimension ", d)));
    tensor.shape.push_back(dim);
  }
  if (!offsets->is_array() || offsets->size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": data_offsets is ", Quoted(offsets->dump()),
                     ", not [begin, end]"));
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(tensor.begin,
                             Unsigned((*offsets)[0], absl::StrCat(label, ": data_offsets[0]")));
  BLOCKSWAP_ASSIGN_OR_RETURN(tensor.end,
                             Unsigned((*offsets)[1], absl::StrCat(label, ": data_offsets[1]")));
  BLOCKSWAP_RETURN_IF_ERROR(CheckTensor(tensor, data_bytes));
  return tensor;
}

absl::Status ParseMetadata(const Json& value, std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("__metadata__ is ", value.type_name(), ", not an object"));
  }
  for (const auto& [key, entry] : value.items()) {
    if (!entry.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("__metadata__ entry ", Quoted(key), " is ",
                                                     entry.type_name(), ", not a string"));
    }
    metadata->emplace(key, entry.get<std::string>());
  }
  return absl::OkStatus();
}

// One JSON event inside a top-level value, as HeaderBuilder keeps it.
struct Event {
  enum class Kind {
    kNull,
    kBoolean,
    kInteger,
    kUnsigned,
    kFloat,
    kString,
    kKey,
    kStartObject,
    kEndObject,
    kStartArray,
    kEndArray,
  };
  Kind kind = Kind::kNull;
  bool boolean = false;
  int64_t integer = 0;
  uint64_t unsigned_integer = 0;
  double number = 0;
  std::string text;  // of a string or a key
};
using Kind = Event::Kind;

// The tensor of an entry whose events have exactly the form of a tensor's:
// {"dtype": string, "shape": [unsigned...], "data_offsets": [unsigned,
// unsigned]}, each key once, in any order. nullopt for any other entry
// (ParseTensor then says what is wrong with it). Sets no name.
std::optional<SafetensorsTensor> TensorOfEvents(absl::Span<const Event> events) {
  if (events.size() < 2 || events.front().kind != Kind::kStartObject ||
      events.back().kind != Kind::kEndObject) {
    return std::nullopt;
  }
  SafetensorsTensor tensor;
  bool dtype = false, shape = false, offsets = false;
  const size_t end = events.size() - 1;  // the closing brace
  auto is = [&](size_t at, Kind kind) { return at < end && events[at].kind == kind; };
  for (size_t i = 1; i < end;) {
    if (!is(i, Kind::kKey)) return std::nullopt;
    const std::string& key = events[i++].text;
    if (key == "dtype" && !dtype && is(i, Kind::kString)) {
      tensor.dtype = events[i++].text;
      dtype = true;
    } else if (key == "shape" && !shape && is(i, Kind::kStartArray)) {
      for (++i; is(i, Kind::kUnsigned) && tensor.shape.size() < kMaxRank; ++i) {
        tensor.shape.push_back(events[i].unsigned_integer);
      }
      if (!is(i++, Kind::kEndArray)) return std::nullopt;
      shape = true;
    } else if (key == "data_offsets" && !offsets && is(i, Kind::kStartArray) &&
               is(i + 1, Kind::kUnsigned) && is(i + 2, Kind::kUnsigned) &&
               is(i + 3, Kind::kEndArray)) {
      tensor.begin = events[i + 1].unsigned_integer;
      tensor.end = events[i + 2].unsigned_integer;
      i += 4;
      offsets = true;
    } else {
      return std::nullopt;
    }
  }
  if (!dtype || !shape || !offsets) return std::nullopt;
  return tensor;
}

// The header's tensors from nlohmann's SAX events (Json::sax_parse), each
// top-level value (a tensor's entry, or __metadata__) checked as soon as it
// ends and then dropped, so nothing is scanned twice and the parse is linear
// in the header. (nlohmann's DOM parser with a callback rescans the parent
// object at the end of every object: quadratic in the tensors.)
//
// A tensor's entry is kept as its events, in a buffer reused from entry to
// entry, and taken by TensorOfEvents when it has the usual form: no JSON
// value is built for it. Any other entry (and __metadata__, and an entry of
// more than kMaxKeptEvents events) is built as a JSON value, so that
// ParseTensor and ParseMetadata say, in one place, what is wrong with it.
// An event handler that returns false ends the parse with status().
class HeaderBuilder {
 public:
  // Events between two asks of the cancellation: about a thousand tensors.
  static constexpr uint64_t kEventsPerCheck = 1 << 14;
  // A tensor's entry with kMaxRank dimensions has fewer events than this.
  static constexpr size_t kMaxKeptEvents = 256;
  // A tensor's entry nests two levels (the entry, its arrays); deeper values
  // are refused before they are built, so that no message formats one by
  // recursion.
  static constexpr size_t kMaxEntryDepth = 8;

  HeaderBuilder(SafetensorsHeader& result, const Cancellation& cancellation)
      : result_(result), cancellation_(cancellation) {}

  const absl::Status& status() const { return status_; }

  // The SAX interface: each event fills the next slot of events_.
  bool null() { return Handle(Slot(Kind::kNull)); }
  bool boolean(bool value) {
    Event& event = Slot(Kind::kBoolean);
    event.boolean = value;
    return Handle(event);
  }
  bool number_integer(Json::number_integer_t value) {
    Event& event = Slot(Kind::kInteger);
    event.integer = value;
    return Handle(event);
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    Event& event = Slot(Kind::kUnsigned);
    event.unsigned_integer = value;
    return Handle(event);
  }
  bool number_float(Json::number_float_t value, const std::string&) {
    Event& event = Slot(Kind::kFloat);
    event.number = value;
    return Handle(event);
  }
  bool string(std::string& value) {
    Event& event = Slot(Kind::kString);
    event.text.assign(value);  // into the slot's own buffer: no allocation once it is big enough
    return Handle(event);
  }
  bool key(std::string& value) {
    Event& event = Slot(Kind::kKey);
    event.text.assign(value);
    return Handle(event);
  }
  bool binary(Json::binary_t&) { return Fail("the safetensors header holds binary data"); }
  bool start_object(size_t) { return Handle(Slot(Kind::kStartObject)); }
  bool end_object() { return Handle(Slot(Kind::kEndObject)); }
  bool start_array(size_t) { return Handle(Slot(Kind::kStartArray)); }
  bool end_array() { return Handle(Slot(Kind::kEndArray)); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& error) {
    status_ = NotJson("the safetensors header", error.what());
    return false;
  }

  // After a successful parse: refuses a name given twice.
  absl::Status CheckNamesOnce() const {
    std::vector<const std::string*> names;
    names.reserve(result_.tensors.size());
    for (const SafetensorsTensor& tensor : result_.tensors) names.push_back(&tensor.name);
    std::sort(names.begin(), names.end(),
              [](const std::string* a, const std::string* b) { return *a < *b; });
    for (size_t i = 1; i < names.size(); ++i) {
      if (*names[i] == *names[i - 1]) return TwiceError(*names[i]);
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status TwiceError(absl::string_view name) {
    return absl::InvalidArgumentError(
        absl::StrCat("the safetensors header names tensor ", Quoted(name), " twice"));
  }

  Event& Slot(Kind kind) {
    if (kept_ == events_.size()) events_.emplace_back();
    Event& event = events_[kept_];
    event.kind = kind;
    return event;
  }
  bool Fail(std::string message) {
    status_ = absl::InvalidArgumentError(std::move(message));
    return false;
  }
  bool Step() {
    if (++events_seen_ % kEventsPerCheck != 0) return true;
    status_ = cancellation_.Check();
    return status_.ok();
  }

  // `event` is events_[kept_]: kept (kept_ grows) while the entry is kept as
  // events, else used and overwritten by the next.
  bool Handle(const Event& event) {
    if (!Step()) return false;
    if (!top_open_) {
      if (event.kind == Kind::kStartObject) {
        top_open_ = true;
        return true;
      }
      return Fail(
          absl::StrCat("the safetensors header is ", TypeName(event.kind), ", not an object"));
    }
    if (!in_entry_) {
      if (event.kind == Kind::kEndObject) return true;  // the header ends
      if (event.kind == Kind::kKey) return StartEntry(event.text);
      in_entry_ = true;  // the first event of name_'s value
    }
    const bool opens = event.kind == Kind::kStartObject || event.kind == Kind::kStartArray;
    const bool closes = event.kind == Kind::kEndObject || event.kind == Kind::kEndArray;
    if (opens && ++depth_ > kMaxEntryDepth) {
      return Fail(absl::StrCat(name_ == kMetadataKey ? std::string(kMetadataKey)
                                                     : absl::StrCat("tensor ", Quoted(name_)),
                               " nests deeper than ", kMaxEntryDepth, " levels"));
    }
    if (closes) --depth_;
    if (building_) {
      Build(event);
    } else if (++kept_ == kMaxKeptEvents) {
      BuildKept();
    }
    return depth_ == 0 ? EndEntry() : true;
  }

  bool StartEntry(const std::string& name) {
    if (name == kMetadataKey) {
      if (metadata_seen_) return Fail(std::string(TwiceError(name).message()));
      metadata_seen_ = true;
    } else if (++tensors_ > kSafetensorsMaxTensors) {
      return Fail(absl::StrCat("the safetensors header names more than ", kSafetensorsMaxTensors,
                               " tensors (the limit)"));
    }
    name_ = name;
    building_ = name == kMetadataKey;
    return true;
  }

  // name_'s value has ended.
  bool EndEntry() {
    absl::Status added;
    if (!building_) {
      if (std::optional<SafetensorsTensor> tensor = TensorOfEvents({events_.data(), kept_})) {
        tensor->name = std::move(name_);
        added = CheckTensor(*tensor, result_.data_bytes);
        if (added.ok()) result_.tensors.push_back(*std::move(tensor));
        return Finish(std::move(added));
      }
      BuildKept();
    }
    if (name_ == kMetadataKey) {
      added = ParseMetadata(entry_, &result_.metadata);
    } else if (auto tensor = ParseTensor(name_, entry_, result_.data_bytes); tensor.ok()) {
      result_.tensors.push_back(*std::move(tensor));
    } else {
      added = tensor.status();
    }
    return Finish(std::move(added));
  }
  bool Finish(absl::Status added) {
    in_entry_ = false;
    building_ = false;
    kept_ = 0;
    entry_ = nullptr;
    open_.clear();
    status_ = std::move(added);
    return status_.ok();
  }

  // From here on the entry is built as a JSON value, starting with the
  // events kept so far.
  void BuildKept() {
    building_ = true;
    for (size_t i = 0; i < kept_; ++i) Build(events_[i]);
    kept_ = 0;
  }
  void Build(const Event& event) {
    switch (event.kind) {
      case Kind::kNull:
        Add(nullptr);
        break;
      case Kind::kBoolean:
        Add(event.boolean);
        break;
      case Kind::kInteger:
        Add(event.integer);
        break;
      case Kind::kUnsigned:
        Add(event.unsigned_integer);
        break;
      case Kind::kFloat:
        Add(event.number);
        break;
      case Kind::kString:
        Add(event.text);
        break;
      case Kind::kKey:
        member_ = event.text;
        break;
      case Kind::kStartObject:
        open_.push_back(&Add(Json::object()));
        break;
      case Kind::kStartArray:
        open_.push_back(&Add(Json::array()));
        break;
      case Kind::kEndObject:
      case Kind::kEndArray:
        open_.pop_back();
        break;
    }
  }
  // `value` in the container open innermost (as member_ of an object), or as
  // the entry itself.
  Json& Add(Json value) {
    if (open_.empty()) return entry_ = std::move(value);
    Json& container = *open_.back();
    if (container.is_array()) {
      container.push_back(std::move(value));
      return container.back();
    }
    return container[member_] = std::move(value);
  }

  static absl::string_view TypeName(Kind kind) {
    switch (kind) {
      case Kind::kNull:
        return "null";
      case Kind::kBoolean:
        return "boolean";
      case Kind::kInteger:
      case Kind::kUnsigned:
      case Kind::kFloat:
        return "number";
      case Kind::kString:
        return "string";
      case Kind::kStartArray:
        return "array";
      default:
        return "object";
    }
  }

  SafetensorsHeader& result_;
  const Cancellation& cancellation_;
  absl::Status status_;
  uint64_t events_seen_ = 0;
  bool top_open_ = false;  // inside the top-level object
  bool metadata_seen_ = false;
  uint64_t tensors_ = 0;       // top-level keys but __metadata__ so far
  std::string name_;           // the top-level key whose value is being read
  bool in_entry_ = false;      // that value has begun
  size_t depth_ = 0;           // containers of the value open
  std::vector<Event> events_;  // the value's events while it is kept as events
  size_t kept_ = 0;            // ... how many of them
  bool building_ = false;      // the value is built as a JSON value instead:
  Json entry_;                 // ... the value
  std::vector<Json*> open_;    // ... its containers not ended yet, innermost last
  std::string member_;         // ... the key of the next value in an object
};

}  // namespace

absl::StatusOr<uint64_t> SafetensorsHeaderBytes(absl::string_view prefix, uint64_t file_size) {
  if (file_size < kSafetensorsPrefixBytes || prefix.size() < kSafetensorsPrefixBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("file of ", file_size,
                     " bytes is too short for a safetensors file (its header length alone takes ",
                     kSafetensorsPrefixBytes, " bytes)"));
  }
  uint64_t length = 0;
  for (size_t i = 0; i < kSafetensorsPrefixBytes; ++i) {
    length |= uint64_t{static_cast<uint8_t>(prefix[i])} << (8 * i);
  }
  if (length > file_size - kSafetensorsPrefixBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("header length ", length, " reaches past the end of the file (", file_size,
                     " bytes, so at most ", file_size - kSafetensorsPrefixBytes, ")"));
  }
  BLOCKSWAP_RETURN_IF_ERROR(WithinHeaderLimit(length));
  return length;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view header,
                                                         uint64_t file_size,
                                                         const Cancellation& cancellation) {
  SafetensorsHeader result;
  result.header_bytes = header.size();
  if (file_size < kSafetensorsPrefixBytes ||
      header.size() > file_size - kSafetensorsPrefixBytes) {
    return absl::InvalidArgumentError(absl::StrCat("header of ", header.size(),
                                                   " bytes does not fit in a file of ", file_size,
                                                   " bytes"));
  }
  BLOCKSWAP_RETURN_IF_ERROR(WithinHeaderLimit(header.size()));
  result.data_offset = kSafetensorsPrefixBytes + header.size();
  result.data_bytes = file_size - result.data_offset;
  HeaderBuilder builder(result, cancellation);
  if (!Json::sax_parse(header.begin(), header.end(), &builder)) return builder.status();
  BLOCKSWAP_RETURN_IF_ERROR(builder.CheckNamesOnce());
  std::sort(result.tensors.begin(), result.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  uint64_t covered = 0;  // the data section is covered up to here
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& tensor : result.tensors) {
    if (tensor.begin < covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", Quoted(tensor.name), " at [", tensor.begin, ", ", tensor.end,
          ") overlaps tensor ", Quoted(previous->name), " at [", previous->begin, ", ",
          previous->end, ")"));
    }
    if (tensor.begin > covered) {
      return absl::InvalidArgumentError(absl::StrCat("bytes [", covered, ", ", tensor.begin,
                                                     ") of the data section belong to no tensor "
                                                     "(the format has no holes)"));
    }
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered != result.data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data section has ", result.data_bytes, " bytes but its tensors cover ",
                     covered, " (the file has trailing bytes or was cut short)"));
  }
  return result;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsPrefix(absl::string_view bytes,
                                                         uint64_t file_size) {
  BLOCKSWAP_ASSIGN_OR_RETURN(uint64_t length, SafetensorsHeaderBytes(bytes, file_size));
  if (bytes.size() - kSafetensorsPrefixBytes < length) {
    return absl::InvalidArgumentError(absl::StrCat("only ", bytes.size(),
                                                   " bytes given for a header that ends at byte ",
                                                   kSafetensorsPrefixBytes + length));
  }
  return ParseSafetensorsHeader(bytes.substr(kSafetensorsPrefixBytes, length), file_size);
}

}  // namespace blockswap
