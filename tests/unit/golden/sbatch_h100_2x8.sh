#!/bin/bash

# Parameters
#SBATCH --account=proj
#SBATCH --array=0-2%3
#SBATCH --constraint=h100
#SBATCH --cpus-per-task=12
#SBATCH --error=/sweep/slurm/%A_%a/%A_%a_0_log.err
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --job-name=sweeper-3pts
#SBATCH --mem=0
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --open-mode=append
#SBATCH --output=/sweep/slurm/%A_%a/%A_%a_0_log.out
#SBATCH --partition=gpu
#SBATCH --qos=high
#SBATCH --signal=USR2@90
#SBATCH --time=11
#SBATCH --wckey=submitit

# setup
module load cuda/12.4
source /opt/venv/bin/activate

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /sweep/slurm/%A_%a/%A_%a_%t_log.out --error /sweep/slurm/%A_%a/%A_%a_%t_log.err python -u -m submitit.core._submit /sweep/slurm/%j
