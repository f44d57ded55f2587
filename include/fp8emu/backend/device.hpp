/// \file device.hpp
/// \brief The backend layer's public header: the Device interface and its record types
/// (fp8emu/device/device.hpp, a lower layer, so the CUDA library implements it without including
/// the backend), the devices cpu_device(), element_device() and cuda_device(), and where layers run
/// (fp8emu/backend/select.hpp: --backend kinds, the CUDA probe's verdict, fallback).
#pragma once

#include "fp8emu/backend/select.hpp"
#include "fp8emu/device/device.hpp"
