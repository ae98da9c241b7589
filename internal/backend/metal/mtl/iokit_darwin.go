//go:build darwin

package mtl

import (
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Metal does not say how many cores a GPU has; the I/O Registry does, as
// the "gpu-core-count" property of the AGXAccelerator service (Apple
// Silicon only). These are the IOKit and CoreFoundation calls that read it.
var (
	iokitOnce sync.Once
	iokitOK   bool

	ioServiceMatching               func(name string) uintptr
	ioServiceGetMatchingService     func(mainPort uint32, matching uintptr) uint32
	ioRegistryEntryCreateCFProperty func(entry uint32, key, allocator uintptr, options uint32) uintptr
	ioObjectRelease                 func(object uint32) int32
	cfStringCreateWithCString       func(allocator uintptr, s string, encoding uint32) uintptr
	cfGetTypeID                     func(cf uintptr) uint
	cfNumberGetTypeID               func() uint
	cfNumberGetValue                func(number uintptr, numberType int, value unsafe.Pointer) bool
	cfRelease                       func(cf uintptr)
)

const (
	kIOMainPortDefault    = 0
	kCFStringEncodingUTF8 = 0x08000100
	kCFNumberSInt64Type   = 4
	ioFrameworkPath       = "/System/Library/Frameworks/IOKit.framework/IOKit"
	cfFrameworkPath       = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
	gpuCoreCountProperty  = "gpu-core-count"
	appleGPUServiceClass  = "AGXAccelerator"
)

func loadIOKit() bool {
	iokitOnce.Do(func() {
		io, err := purego.Dlopen(ioFrameworkPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return
		}
		cf, err := purego.Dlopen(cfFrameworkPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return
		}
		purego.RegisterLibFunc(&ioServiceMatching, io, "IOServiceMatching")
		purego.RegisterLibFunc(&ioServiceGetMatchingService, io, "IOServiceGetMatchingService")
		purego.RegisterLibFunc(&ioRegistryEntryCreateCFProperty, io, "IORegistryEntryCreateCFProperty")
		purego.RegisterLibFunc(&ioObjectRelease, io, "IOObjectRelease")
		purego.RegisterLibFunc(&cfStringCreateWithCString, cf, "CFStringCreateWithCString")
		purego.RegisterLibFunc(&cfGetTypeID, cf, "CFGetTypeID")
		purego.RegisterLibFunc(&cfNumberGetTypeID, cf, "CFNumberGetTypeID")
		purego.RegisterLibFunc(&cfNumberGetValue, cf, "CFNumberGetValue")
		purego.RegisterLibFunc(&cfRelease, cf, "CFRelease")
		iokitOK = true
	})
	return iokitOK
}

// GPUCoreCount is the number of cores of the Apple GPU, or 0 when the
// system does not say (an Intel Mac, or a registry without the property).
// Reference: https://developer.apple.com/documentation/iokit/1514687-ioregistryentrycreatecfproperty
func GPUCoreCount() int {
	if !loadIOKit() {
		return 0
	}
	// IOServiceGetMatchingService consumes the matching dictionary.
	matching := ioServiceMatching(appleGPUServiceClass)
	if matching == 0 {
		return 0
	}
	service := ioServiceGetMatchingService(kIOMainPortDefault, matching)
	if service == 0 {
		return 0
	}
	defer ioObjectRelease(service)
	key := cfStringCreateWithCString(0, gpuCoreCountProperty, kCFStringEncodingUTF8)
	if key == 0 {
		return 0
	}
	defer cfRelease(key)
	prop := ioRegistryEntryCreateCFProperty(service, key, 0, 0)
	if prop == 0 {
		return 0
	}
	defer cfRelease(prop)
	if cfGetTypeID(prop) != cfNumberGetTypeID() {
		return 0
	}
	var n int64
	if !cfNumberGetValue(prop, kCFNumberSInt64Type, unsafe.Pointer(&n)) || n < 0 {
		return 0
	}
	return int(n)
}
