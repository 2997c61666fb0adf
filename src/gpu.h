/* gpu.h — finding this node's GPUs, behind one function with a fallback of none. */
#ifndef BEAM_GPU_H
#define BEAM_GPU_H

#define BEAM_MAX_GPUS 64
#define BEAM_GPU_ID_LEN 16

/* Fills ids with the node's GPU ids (as CUDA_VISIBLE_DEVICES would name them)
 * and returns how many: the entries of CUDA_VISIBLE_DEVICES when it is set,
 * else one per /proc/driver/nvidia/gpus entry, else 0. */
int beam_gpu_detect(char ids[][BEAM_GPU_ID_LEN], int max);

#endif
