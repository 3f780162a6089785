"""The GPU calls of the Python binding: a Receiver(gpu=0) either has a GPU
(bytes go to the device and come back the same) or says why not with
Status.GPU_FAILED, and serves on."""
import sys

import threechains as tc

worker = tc.Worker(tc.Context("tcp"))
receiver = tc.Receiver(worker, gpu=0, on_error=lambda e: None)
try:
    address = receiver.allocate_device("field", 64)
except tc.Error as error:
    print("no GPU:", error)
    sys.exit(0 if error.status == tc.Status.GPU_FAILED and "no GPU" in str(error) else 1)
data = bytes(range(64))
receiver.copy_to_device(address, data)
same = receiver.copy_from_device(address, 64) == data
print("GPU: 64 bytes to the device and back:", "same" if same else "DIFFERENT")
receiver.poll()
sys.exit(0 if same else 1)
