// ThreeChains: send code + data to another process in one one-sided put, run it there.
#pragma once

#include <threechains/channel.hpp>
#include <threechains/codec.hpp>
#include <threechains/container.hpp>
#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/import_policy.hpp>
#include <threechains/jit_cache.hpp>
#include <threechains/node.hpp>
#include <threechains/payload_helpers.hpp>
#include <threechains/receiver.hpp>
#include <threechains/trust.hpp>
#include <threechains/ucx/context.hpp>
#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/listener.hpp>
#include <threechains/ucx/memory.hpp>
#include <threechains/ucx/worker.hpp>
